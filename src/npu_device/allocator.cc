// The memory of the npu test device: one aclrtMalloc block per storage (no
// caching allocator), the record of live blocks that maps a pointer to its
// device, and storage resizing.
#include <c10/core/Allocator.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>

#include "npu_device/runtime.h"
#include "npu_device/runtime_internal.h"

namespace polyops::npu {
namespace {

class NpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    const AclRuntime& runtime = Runtime();
    const c10::DeviceIndex device = CurrentDevice();
    void* ptr = nullptr;
    if (nbytes > 0) {
      BindThread();
      // Policy 0 = ACL_MEM_MALLOC_HUGE_FIRST, what torch_npu passes.
      const AclError status = runtime.malloc(&ptr, nbytes, 0);
      if (status != 0) {
        const char* message = runtime.recent_err_msg != nullptr
                                  ? runtime.recent_err_msg()
                                  : nullptr;
        TORCH_CHECK_WITH(OutOfMemoryError, false, "npu: aclrtMalloc(", nbytes,
                         " bytes) on npu:", static_cast<int>(device),
                         " failed with aclError ", status, ": ",
                         message != nullptr ? message : "(no message)");
      }
      State& state = GetState();
      std::lock_guard<std::mutex> lock(state.blocks_mutex);
      state.blocks[reinterpret_cast<uintptr_t>(ptr)] = {nbytes, device};
    }
    return {ptr, ptr, &FreeBlock,
            c10::Device(c10::DeviceType::PrivateUse1, device)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &FreeBlock; }

  void copy_data(void* dest, const void* src, size_t count) const override {
    Memcpy(dest, count, src, count, MemcpyKind::kDeviceToDevice);
  }

 private:
  static void FreeBlock(void* ptr) {
    if (ptr == nullptr) return;
    State& state = GetState();
    {
      std::lock_guard<std::mutex> lock(state.blocks_mutex);
      state.blocks.erase(reinterpret_cast<uintptr_t>(ptr));
    }
    // Work queued on a stream may still use the block (a tensor dropped
    // right after the op that writes it was launched): torch's caching
    // allocators keep such blocks until the stream reaches them; without a
    // cache, let the queued work finish first. A deleter cannot throw, so
    // a fault of that work is kept for the next synchronization
    // (RaisePendingFault) rather than lost; a failing free leaks the
    // block, which the tests see through the double's live-byte count.
    const AclRuntime& runtime = state.runtime;
    if (runtime.synchronize_device != nullptr) {
      const AclError status = runtime.synchronize_device();
      if (status != 0) {
        const char* message = runtime.recent_err_msg != nullptr
                                  ? runtime.recent_err_msg()
                                  : nullptr;
        std::lock_guard<std::mutex> lock(state.fault_mutex);
        if (state.fault.empty()) {
          state.fault = c10::str(
              "npu: a device fault in work queued earlier (found when a "
              "tensor was freed): aclrtSynchronizeDevice failed with "
              "aclError ",
              status, ": ",
              message != nullptr && *message != '\0'
                  ? message
                  : "(aclGetRecentErrMsg gave no message)");
        }
      }
    }
    if (runtime.free != nullptr) runtime.free(ptr);
  }
};

NpuAllocator allocator;
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &allocator);

}  // namespace

c10::Allocator* DeviceAllocator() { return &allocator; }

c10::Device DeviceOfPointer(const void* ptr) {
  State& state = GetState();
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  {
    std::lock_guard<std::mutex> lock(state.blocks_mutex);
    auto it = state.blocks.upper_bound(address);
    if (it != state.blocks.begin()) {
      --it;
      if (address < it->first + it->second.first) {
        return c10::Device(c10::DeviceType::PrivateUse1, it->second.second);
      }
    }
  }
  return c10::Device(c10::DeviceType::PrivateUse1, CurrentDevice());
}

void ResizeStorageBytes(c10::StorageImpl* storage, size_t new_bytes) {
  TORCH_CHECK(storage->resizable(),
              "npu: trying to resize a storage that is not resizable");
  TORCH_CHECK(storage->device_type() == c10::DeviceType::PrivateUse1,
              "npu: ResizeStorageBytes got a storage on ", storage->device());
  DeviceScope scope(storage->device().index());
  c10::DataPtr fresh = allocator.allocate(new_bytes);
  const size_t keep = std::min(new_bytes, storage->nbytes());
  if (keep > 0 && storage->data_ptr().get() != nullptr) {
    Memcpy(fresh.get(), new_bytes, storage->data_ptr().get(), keep,
           MemcpyKind::kDeviceToDevice);
  }
  storage->set_data_ptr_noswap(std::move(fresh));
  storage->set_nbytes(new_bytes);
}

}  // namespace polyops::npu
