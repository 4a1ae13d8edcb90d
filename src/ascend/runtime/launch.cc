#include "ascend/runtime/launch.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/error.h"

namespace polyops::ascend {
namespace {

constexpr uintptr_t kAlignment = 32;  // CANN: addresses 32-byte aligned

struct Placement {
  void* base;      // 32-byte aligned, at or below the view's first element
  int64_t offset;  // the view's first element, in elements from base
};

Placement Place(const Tensor& view, const char* op) {
  const auto address = reinterpret_cast<uintptr_t>(view.data());
  const uintptr_t base = address & ~(kAlignment - 1);
  const auto gap = static_cast<int64_t>(address - base);
  POLYOPS_CHECK(gap % view.element_size() == 0, "polyops.", op,
                ": a tensor's address is not a multiple of its element size");
  return {reinterpret_cast<void*>(base), gap / view.element_size()};
}

// CANN's view: dims, strides in elements, an element offset from the
// aligned base, and storage dims spanning the offset plus the view.
AclTensor* CreateTensor(const Runtime& rt, const Tensor& view,
                        const Placement& place, const char* op) {
  int64_t extent = place.offset + 1;
  for (int d = 0; d < view.ndim(); ++d) {
    extent += (view.size(d) - 1) * view.stride(d);
  }
  const int64_t storage[1] = {view.numel() == 0 ? 0 : extent};
  AclTensor* tensor = rt.create_tensor(
      view.shape(), static_cast<uint64_t>(view.ndim()), ToAcl(view.dtype()),
      view.strides(), place.offset, kAclFormatNd, storage, 1, place.base);
  if (!tensor) {
    const char* message = rt.get_recent_err_msg();
    throw BackendError(detail::Concat(
        "polyops.", op, ": aclCreateTensor failed for shape ",
        view.ShapeString(), ": ", message ? message : "(no message)"));
  }
  return tensor;
}

// A stream's pooled block: scratch operands, then the workspace. Its mutex
// is held from binding to the last launch of a call, so the block cannot
// move, be freed or be shared with another thread's call on the stream in
// between.
struct Pool {
  Pool(AclStream stream, int device) : stream(stream), device(device) {}

  std::mutex mutex;
  const AclStream stream;
  const int device;  // where the block lives and the stream runs
  // Under mutex:
  char* data = nullptr;
  uint64_t size = 0;
  bool launched = false;  // a launch using the block was queued
  bool retired = false;   // freed and out of the registry
  // Under the registry's mutex: when a call last took the pool.
  uint64_t last_use = 0;
};

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

// The pool of a call's stream, locked for the call. A pool none of whose
// launches was ever queued (its calls failed, e.g. on a handle that is not
// a stream) is freed when the call ends: nothing can still read it.
class LockedPool {
 public:
  LockedPool(const Handle& handle, const char* op) : op_(op) {
    if (Deferred().count.load(std::memory_order_relaxed) >=
        kMaxDeferredBuffers) {
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
  ~LockedPool() {
    if (!pool_->launched && RuntimeLoaded()) {
      try {
        RetirePool(*pool_, op_);  // no synchronization: never launched
      } catch (...) {
      }
    }
  }
  LockedPool(const LockedPool&) = delete;
  LockedPool& operator=(const LockedPool&) = delete;

  Pool& operator*() const { return *pool_; }
  Pool* operator->() const { return pool_.get(); }

 private:
  static std::shared_ptr<Pool> FindOrAdd(const Handle& handle,
                                         std::shared_ptr<Pool>* victim) {
    PoolRegistry& registry = Registry();
    std::lock_guard<std::mutex> lock(registry.mutex);
    std::shared_ptr<Pool>& pool = registry.pools[handle.stream];
    if (!pool)
      pool = std::make_shared<Pool>(handle.stream, handle.device.index);
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

  const char* op_;
  std::shared_ptr<Pool> pool_;
  std::unique_lock<std::mutex> lock_;
};

// The pool's block grown to `bytes` (the caller holds pool.mutex and has
// queued nothing of its call yet, so the old block holds no data the call
// needs).
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

// A CANN object creator's result, or BackendError with CANN's message.
void CheckCreated(const void* object, const char* op, const char* call) {
  if (object) return;
  const char* message = GetRuntime().get_recent_err_msg();
  throw BackendError(
      detail::Concat("polyops", op ? "." : "", op ? op : "", ": ", call,
                     " failed: ", message ? message : "(no message)"));
}

}  // namespace

AclDataType ToAcl(DataType dtype) {
  switch (dtype) {
    case DataType::kBool:
      return AclDataType::kBool;
    case DataType::kInt8:
      return AclDataType::kInt8;
    case DataType::kInt16:
      return AclDataType::kInt16;
    case DataType::kInt32:
      return AclDataType::kInt32;
    case DataType::kInt64:
      return AclDataType::kInt64;
    case DataType::kUInt8:
      return AclDataType::kUInt8;
    case DataType::kFloat16:
      return AclDataType::kFloat16;
    case DataType::kBFloat16:
      return AclDataType::kBFloat16;
    case DataType::kFloat32:
      return AclDataType::kFloat;
    case DataType::kFloat64:
      return AclDataType::kDouble;
  }
  return AclDataType::kFloat;
}

IntArrayHandle::IntArrayHandle(std::initializer_list<int64_t> values) {
  const Runtime& rt = GetRuntime();
  array_ = rt.create_int_array(values.begin(), values.size());
  CheckCreated(array_, nullptr, "aclCreateIntArray");
}

AclScalar* ScalarOf(DataType dtype, double value) {
  const Runtime& rt = GetRuntime();
  auto as_float = static_cast<float>(value);
  auto as_int = static_cast<int64_t>(value);
  AclScalar* scalar = nullptr;
  if (dtype == DataType::kFloat64) {
    scalar = rt.create_scalar(&value, AclDataType::kDouble);
  } else if (IsFloatingPoint(dtype)) {
    scalar = rt.create_scalar(&as_float, AclDataType::kFloat);
  } else {
    scalar = rt.create_scalar(&as_int, AclDataType::kInt64);
  }
  CheckCreated(scalar, nullptr, "aclCreateScalar");
  return scalar;
}

AclScalar* ScalarFloat(float value) {
  const Runtime& rt = GetRuntime();
  AclScalar* scalar = rt.create_scalar(&value, AclDataType::kFloat);
  CheckCreated(scalar, nullptr, "aclCreateScalar");
  return scalar;
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

ExecutorCache::~ExecutorCache() {
  // Instances die on eviction or clear_cache, or never (the caches live to
  // exit): never after the runtime was torn down.
  if (RuntimeLoaded()) Release();
}

void ExecutorCache::Release() {
  const Runtime& rt = GetRuntime();
  if (executor_) rt.destroy_executor(executor_);
  // A list destroys its tensors (trap 13); the others go one by one.
  for (AclTensorList* list : lists_) rt.destroy_tensor_list(list);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (!listed_[i]) rt.destroy_tensor(tensors_[i]);
  }
  executor_ = nullptr;
  workspace_size_ = 0;
  tensors_.clear();
  listed_.clear();
  lists_.clear();
  slots_.clear();
  offsets_.clear();
}

void ExecutorCache::Point(const char* op, size_t i, void* base) {
  const Runtime& rt = GetRuntime();
  const Slot& slot = slots_[i];
  if (slot.ir >= 0) {
    CheckStatus(rt.set_dynamic_input_tensor_addr(
                    executor_, static_cast<size_t>(slot.ir),
                    static_cast<size_t>(slot.element), lists_[slot.list], base),
                op, "aclSetDynamicInputTensorAddr");
  } else if (slot.input >= 0) {
    CheckStatus(
        rt.set_input_tensor_addr(executor_, static_cast<size_t>(slot.input),
                                 tensors_[i], base),
        op, "aclSetInputTensorAddr");
  }
  if (slot.output >= 0) {
    CheckStatus(
        rt.set_output_tensor_addr(executor_, static_cast<size_t>(slot.output),
                                  tensors_[i], base),
        op, "aclSetOutputTensorAddr");
  }
}

uint64_t ExecutorCache::Bind(const char* op, const char* api,
                             const Operand* operands, size_t count,
                             char* scratch, PrepareFn prepare, void* context) {
  const Runtime& rt = GetRuntime();
  std::vector<Tensor> views;
  std::vector<Placement> places;
  views.reserve(count);
  places.reserve(count);
  bool fits = executor_ != nullptr && offsets_.size() == count;
  for (size_t i = 0; i < count; ++i) {
    const Operand& operand = operands[i];
    views.push_back(
        operand.scratch_offset >= 0
            ? operand.view.WithData(scratch + operand.scratch_offset)
            : operand.view);
    places.push_back(Place(views.back(), op));
    fits = fits && offsets_[i] == places.back().offset;
  }
  if (fits) {
    for (size_t i = 0; i < count; ++i) Point(op, i, places[i].base);
    return workspace_size_;
  }
  Release();
  // The setters' index spaces: inputs and outputs in parameter order (a
  // Ref parameter in both), list elements by (parameter, element).
  int64_t inputs = 0, outputs = 0, ir = 0;
  for (size_t i = 0; i < count; ++i) {
    const Operand& operand = operands[i];
    Slot slot;
    if (operand.list >= 0) {
      const bool first = i == 0 || operands[i - 1].list != operand.list;
      slot.list = operand.list;
      slot.ir = first ? ir++ : slots_.back().ir;
      slot.element = first ? 0 : slots_.back().element + 1;
      slot.input = inputs++;
    } else {
      if (operand.input) {
        slot.input = inputs++;
        ++ir;
      }
      if (!operand.input || operand.ref) slot.output = outputs++;
    }
    slots_.push_back(slot);
    tensors_.push_back(CreateTensor(rt, views[i], places[i], op));
    listed_.push_back(false);
    offsets_.push_back(places[i].offset);
  }
  // Lists, in order of their first element.
  for (size_t i = 0; i < count;) {
    if (operands[i].list < 0) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < count && operands[end].list == operands[i].list) ++end;
    POLYOPS_CHECK(operands[i].list == static_cast<int>(lists_.size()),
                  "polyops.", op, ": tensor lists must be numbered 0, 1, ...");
    AclTensorList* list = rt.create_tensor_list(tensors_.data() + i,
                                                static_cast<uint64_t>(end - i));
    if (!list) {
      const char* message = rt.get_recent_err_msg();
      throw BackendError(detail::Concat("polyops.", op,
                                        ": aclCreateTensorList failed: ",
                                        message ? message : "(no message)"));
    }
    lists_.push_back(list);
    for (size_t k = i; k < end; ++k) listed_[k] = true;
    i = end;
  }
  uint64_t workspace = 0;
  AclOpExecutor* executor = nullptr;
  CheckStatus(prepare(context, tensors_.data(), &workspace, &executor), op,
              api);
  // Repeatable, so later calls re-point the descriptors instead of running
  // phase 1 again; destroyed with the instance.
  CheckStatus(rt.set_executor_repeatable(executor), op,
              "aclSetAclOpExecutorRepeatable");
  executor_ = executor;
  workspace_size_ = workspace;
  return workspace;
}

void ExecutorCache::MoveScratch(const char* op, const Operand* operands,
                                size_t count, char* scratch) {
  // The block is aligned, so the scratch views keep their placement.
  for (size_t i = 0; i < count; ++i) {
    if (operands[i].scratch_offset >= 0) {
      Point(op, i, scratch + operands[i].scratch_offset);
    }
  }
}

void ExecutorCache::Run(const char* op, const char* api, const Handle& handle,
                        std::initializer_list<Operand> operands,
                        int64_t scratch_bytes, PrepareFn prepare, void* context,
                        LaunchFn launch) {
  const Launch one{this,    api,   operands.begin(), operands.size(), prepare,
                   context, launch};
  RunLaunches(op, handle, scratch_bytes, &one, 1);
}

void ExecutorCache::Run(const char* op, const char* api, const Handle& handle,
                        const std::vector<Operand>& operands,
                        int64_t scratch_bytes, PrepareFn prepare, void* context,
                        LaunchFn launch) {
  const Launch one{this,    api,     operands.data(), operands.size(),
                   prepare, context, launch};
  RunLaunches(op, handle, scratch_bytes, &one, 1);
}

void RunSteps(const char* op, const Handle& handle, int64_t scratch_bytes,
              std::initializer_list<Step> steps) {
  RunSteps(op, handle, scratch_bytes, steps.begin(), steps.size());
}

void RunSteps(const char* op, const Handle& handle, int64_t scratch_bytes,
              const Step* steps, size_t count) {
  POLYOPS_CHECK(count <= kMaxSteps, "polyops.", op, ": more than ", kMaxSteps,
                " launches in one call");
  ExecutorCache::Launch launches[kMaxSteps];
  for (size_t i = 0; i < count; ++i) {
    const Step& step = steps[i];
    launches[i] = {step.cache,           step.api,     step.operands.begin(),
                   step.operands.size(), step.prepare, step.context,
                   step.launch};
  }
  ExecutorCache::RunLaunches(op, handle, scratch_bytes, launches, count);
}

void ExecutorCache::RunLaunches(const char* op, const Handle& handle,
                                int64_t scratch_bytes, const Launch* launches,
                                size_t count) {
  GetRuntime();
  LockedPool pool(handle, op);
  // Lock order: the stream's pool, then the caches in step order.
  std::unique_lock<std::mutex> locks[kMaxSteps];
  for (size_t i = 0; i < count; ++i) {
    locks[i] = std::unique_lock<std::mutex>(launches[i].cache->mutex_);
  }
  const auto scratch_size = static_cast<uint64_t>(ScratchAlign(scratch_bytes));
  char* scratch = Reserve(*pool, scratch_size);
  uint64_t workspace = 0;
  for (size_t i = 0; i < count; ++i) {
    const Launch& l = launches[i];
    workspace =
        std::max(workspace, l.cache->Bind(op, l.api, l.operands, l.count,
                                          scratch, l.prepare, l.context));
  }
  // Nothing of this call is queued yet, so growing the block (which
  // synchronizes the stream and frees the old one) loses no scratch data.
  char* block = Reserve(*pool, scratch_size + workspace);
  if (scratch_size > 0 && block != scratch) {
    for (size_t i = 0; i < count; ++i) {
      launches[i].cache->MoveScratch(op, launches[i].operands,
                                     launches[i].count, block);
    }
  }
  for (size_t i = 0; i < count; ++i) {
    const Launch& l = launches[i];
    const uint64_t size = l.cache->workspace_size_;
    CheckStatus(l.launch(size ? block + scratch_size : nullptr, size,
                         l.cache->executor_, handle.stream),
                op, l.api);
    pool->launched = true;
  }
}

OneShotCall::~OneShotCall() {
  if (!RuntimeLoaded()) return;
  const Runtime& rt = GetRuntime();
  for (AclTensorList* list : lists_) rt.destroy_tensor_list(list);
  for (AclTensor* tensor : tensors_) rt.destroy_tensor(tensor);
  for (AclIntArray* array : arrays_) rt.destroy_int_array(array);
}

AclTensor* OneShotCall::Describe(const Tensor& view) {
  AclTensor* tensor = CreateTensor(GetRuntime(), view, Place(view, op_), op_);
  tensors_.push_back(tensor);
  return tensor;
}

AclTensorList* OneShotCall::DescribeList(std::initializer_list<Tensor> views) {
  const Runtime& rt = GetRuntime();
  std::vector<AclTensor*> elements;
  for (const Tensor& view : views) {
    elements.push_back(CreateTensor(rt, view, Place(view, op_), op_));
  }
  AclTensorList* list = rt.create_tensor_list(elements.data(), elements.size());
  if (!list) {
    for (AclTensor* tensor : elements) rt.destroy_tensor(tensor);
  }
  CheckCreated(list, op_, "aclCreateTensorList");
  lists_.push_back(list);
  return list;
}

AclIntArray* OneShotCall::IntArray(const std::vector<int64_t>& values) {
  AclIntArray* array =
      GetRuntime().create_int_array(values.data(), values.size());
  CheckCreated(array, op_, "aclCreateIntArray");
  arrays_.push_back(array);
  return array;
}

void OneShotCall::Launch(const Handle& handle, const char* api,
                         AclnnStatus phase1, uint64_t workspace_size,
                         AclOpExecutor* executor, LaunchFn launch) {
  CheckStatus(phase1, op_, api);
  // A failure from here on leaves the executor to CANN: a non-repeatable
  // executor cannot be destroyed by the caller (aclDestroyAclOpExecutor is
  // for repeatable ones only), so an error path may leak it.
  // The pool's lock is held until the launch is queued: another call on
  // this stream growing (and freeing) the block in between would hand
  // this launch freed memory.
  LockedPool pool(handle, op_);
  void* workspace = workspace_size ? Reserve(*pool, workspace_size) : nullptr;
  CheckStatus(launch(workspace, workspace_size, executor, handle.stream), op_,
              api);
  pool->launched = true;
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
