// Device memory of the Ascend backend: the per-stream pools (at most
// kMaxStreamPools, least recently used freed first), the deferred frees of
// dropped instances' DeviceBuffers, process-wide constants, and the one
// blocking device-to-host copy.
#include "ascend/runtime/device_memory.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ascend/runtime/cann.h"
#include "ascend/runtime/launch.h"
#include "core/handle.h"

namespace polyops::ascend {
namespace {

// The pools, one per stream handle seen, at most kMaxStreamPools: the
// least recently used one is freed when another stream needs a pool.
struct PoolRegistry {
  std::mutex mutex;
  std::unordered_map<AclStream, std::shared_ptr<Pool>> pools;
  uint64_t clock = 0;
};

PoolRegistry& Registry() {
  static auto* registry = new PoolRegistry;  // used until exit
  return *registry;
}

// aclrtSynchronizeDevice on `device`, the thread's device restored after.
AclError SynchronizeDevice(const Runtime& rt, int device) {
  int32_t current = -1;
  const bool known = rt.rt_get_device(&current) == 0;
  if (!known || current != device) {
    const AclError status = rt.rt_set_device(device);
    if (status != 0) return status;
  }
  const AclError status = rt.rt_synchronize_device();
  if (known && current != device) rt.rt_set_device(current);
  return status;
}

// Device memory of destroyed instances (DeviceBuffer), freed where a
// failed synchronization can be reported: clear_cache, or the next call once
// kMaxDeferredBuffers wait. A destructor cannot raise, and synchronizing in
// it would consume a fault the user's next synchronization must report.
inline constexpr size_t kMaxDeferredBuffers = 8;
struct DeferredBuffer {
  int device;
  void* data;
};
struct DeferredBuffers {
  std::mutex mutex;
  std::vector<DeferredBuffer> buffers;
  std::atomic<size_t> count{0};
};
DeferredBuffers& Deferred() {
  static auto* deferred = new DeferredBuffers;  // used until exit
  return *deferred;
}

// Synchronizes each device a deferred buffer lives on, then frees them; a
// failed synchronization throws and keeps the buffers of the devices not
// yet freed for the next attempt.
void FreeDeferredBuffers(const char* op) {
  DeferredBuffers& deferred = Deferred();
  std::vector<DeferredBuffer> buffers;
  {
    std::lock_guard<std::mutex> lock(deferred.mutex);
    buffers.swap(deferred.buffers);
    deferred.count = 0;
  }
  std::sort(buffers.begin(), buffers.end(),
            [](const DeferredBuffer& a, const DeferredBuffer& b) {
              return a.device < b.device;
            });
  const Runtime& rt = GetRuntime();
  for (size_t begin = 0; begin < buffers.size();) {
    size_t end = begin;
    while (end < buffers.size() && buffers[end].device == buffers[begin].device)
      ++end;
    const AclError status = SynchronizeDevice(rt, buffers[begin].device);
    if (status != 0) {
      std::lock_guard<std::mutex> lock(deferred.mutex);
      deferred.buffers.insert(deferred.buffers.end(), buffers.begin() + begin,
                              buffers.end());
      deferred.count = deferred.buffers.size();
    }
    CheckStatus(status, op,
                "aclrtSynchronizeDevice (freeing a dropped instance's memory)");
    for (size_t i = begin; i < end; ++i) rt.rt_free(buffers[i].data);
    begin = end;
  }
}

// Frees the pool's block and takes the pool out of the registry (the
// caller holds pool.mutex). A block some queued launch used is freed only
// once the pool's device has finished its work; a failed synchronization
// (a device fault of earlier work) throws and keeps the pool as it was.
void RetirePool(Pool& pool, const char* op) {
  const Runtime& rt = GetRuntime();
  if (pool.data != nullptr) {
    if (pool.launched) {
      CheckStatus(SynchronizeDevice(rt, pool.device), op,
                  "aclrtSynchronizeDevice (freeing a stream's workspace)");
    }
    rt.rt_free(pool.data);
  }
  pool.data = nullptr;
  pool.size = 0;
  pool.retired = true;
  PoolRegistry& registry = Registry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  auto found = registry.pools.find(pool.stream);
  if (found != registry.pools.end() && found->second.get() == &pool) {
    registry.pools.erase(found);
  }
}

}  // namespace

LockedPool::LockedPool(const Handle& handle, const char* op) : op_(op) {
  if (Deferred().count.load(std::memory_order_relaxed) >= kMaxDeferredBuffers) {
    FreeDeferredBuffers(op);
  }
  for (;;) {
    std::shared_ptr<Pool> victim;
    pool_ = FindOrAdd(handle, &victim);
    if (victim) {
      std::lock_guard<std::mutex> lock(victim->mutex);
      if (!victim->retired) RetirePool(*victim, op);
    }
    lock_ = std::unique_lock<std::mutex>(pool_->mutex);
    if (!pool_->retired) return;
    // Retired between the look-up and the lock: look again.
    lock_.unlock();
  }
}

LockedPool::~LockedPool() {
  if (!pool_->launched && RuntimeLoaded()) {
    try {
      RetirePool(*pool_, op_);  // no synchronization: never launched
    } catch (...) {
    }
  }
}

std::shared_ptr<Pool> LockedPool::FindOrAdd(const Handle& handle,
                                            std::shared_ptr<Pool>* victim) {
  PoolRegistry& registry = Registry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  std::shared_ptr<Pool>& pool = registry.pools[handle.stream];
  if (!pool) pool = std::make_shared<Pool>(handle.stream, handle.device.index);
  pool->last_use = ++registry.clock;
  if (registry.pools.size() > kMaxStreamPools) {
    for (const auto& entry : registry.pools) {
      if (!*victim || entry.second->last_use < (*victim)->last_use) {
        *victim = entry.second;
      }
    }
  }
  return pool;
}

char* Reserve(Pool& pool, uint64_t bytes) {
  if (bytes == 0) return pool.data;
  if (pool.size >= bytes) return pool.data;
  const Runtime& rt = GetRuntime();
  const uint64_t size = std::max<uint64_t>(bytes, 1 << 20);
  if (pool.data) {
    // Queued work of earlier calls may still read the old block.
    CheckStatus(rt.rt_synchronize_stream(pool.stream), "ascend",
                "aclrtSynchronizeStream");
    CheckStatus(rt.rt_free(pool.data), "ascend", "aclrtFree");
    pool.data = nullptr;
    pool.size = 0;
  }
  void* data = nullptr;
  CheckStatus(rt.rt_malloc(&data, size, /*ACL_MEM_MALLOC_HUGE_FIRST=*/0),
              "ascend", "aclrtMalloc");
  pool.data = static_cast<char*>(data);
  pool.size = size;
  return pool.data;
}

DeviceBuffer::~DeviceBuffer() {
  if (!data_ || !RuntimeLoaded()) return;
  // Work queued on any stream may still read the buffer: freed later.
  DeferredBuffers& deferred = Deferred();
  std::lock_guard<std::mutex> lock(deferred.mutex);
  deferred.buffers.push_back({device_, data_});
  deferred.count = deferred.buffers.size();
}

void DeviceBuffer::Upload(const void* host, size_t bytes) {
  const Runtime& rt = GetRuntime();
  int32_t device = 0;  // aclrtMalloc allocates on the thread's device
  CheckStatus(rt.rt_get_device(&device), "ascend", "aclrtGetDevice");
  void* data = nullptr;
  CheckStatus(rt.rt_malloc(&data, std::max<size_t>(bytes, 1),
                           /*ACL_MEM_MALLOC_HUGE_FIRST=*/0),
              "ascend", "aclrtMalloc");
  const AclError status =
      rt.rt_memcpy(data, bytes, host, bytes, kAclMemcpyHostToDevice);
  if (status != 0) {
    rt.rt_free(data);
    CheckStatus(status, "ascend", "aclrtMemcpy");
  }
  data_ = data;
  device_ = device;
}

void ReleaseStreamPools() {
  if (!RuntimeLoaded()) return;
  std::vector<std::shared_ptr<Pool>> pools;
  {
    PoolRegistry& registry = Registry();
    std::lock_guard<std::mutex> lock(registry.mutex);
    for (const auto& entry : registry.pools) pools.push_back(entry.second);
  }
  for (const std::shared_ptr<Pool>& pool : pools) {
    std::lock_guard<std::mutex> lock(pool->mutex);
    if (!pool->retired) RetirePool(*pool, "clear_cache");
  }
  FreeDeferredBuffers("clear_cache");
}

void CopyToHost(const Handle& handle, void* host, const void* device,
                size_t bytes, const char* op) {
  if (bytes == 0) return;
  const Runtime& rt = GetRuntime();
  CheckStatus(rt.rt_synchronize_stream(handle.stream), op,
              "aclrtSynchronizeStream");
  CheckStatus(rt.rt_memcpy(host, bytes, device, bytes, kAclMemcpyDeviceToHost),
              op, "aclrtMemcpy (device to host)");
}

const void* ProcessConstant(const char* name, int device_index, size_t bytes,
                            void (*fill)(void* host, size_t bytes)) {
  static std::mutex* mutex = new std::mutex;
  // Used until exit, like the libraries: never freed.
  static auto* constants =
      new std::map<std::pair<std::string, int>, DeviceBuffer*>;
  std::lock_guard<std::mutex> lock(*mutex);
  auto found = constants->find({name, device_index});
  if (found != constants->end()) return found->second->data();
  std::vector<unsigned char> host(bytes);
  fill(host.data(), bytes);
  auto buffer = std::make_unique<DeviceBuffer>();
  buffer->Upload(host.data(), bytes);
  const void* data = buffer->data();
  constants->emplace(std::make_pair(std::string(name), device_index),
                     buffer.release());
  return data;
}

}  // namespace polyops::ascend
