// Shared by the translation units of the npu test device's runtime
// (runtime.cc, allocator.cc, device_hooks.cc): the resolved CANN runtime,
// the process-wide state, and binding the calling thread to its device.
// Not part of runtime.h's interface.
#ifndef POLYOPS_NPU_DEVICE_RUNTIME_INTERNAL_H_
#define POLYOPS_NPU_DEVICE_RUNTIME_INTERNAL_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "npu_device/runtime.h"

namespace polyops::npu {

// The runtime symbols the device calls, with their exact CANN signatures.
struct AclRuntime {
  AclError (*init)(const char* config_path) = nullptr;
  AclError (*set_device)(int32_t device_id) = nullptr;
  AclError (*malloc)(void** dev_ptr, size_t size, int policy) = nullptr;
  AclError (*free)(void* dev_ptr) = nullptr;
  AclError (*memcpy)(void* dst, size_t dest_max, const void* src, size_t count,
                     int kind) = nullptr;
  AclError (*create_stream)(AclStream* stream) = nullptr;
  AclError (*synchronize_stream)(AclStream stream) = nullptr;
  AclError (*synchronize_device)() = nullptr;
  const char* (*recent_err_msg)() = nullptr;  // optional
};

struct State {
  std::mutex init_mutex;
  std::atomic<bool> initialized{false};
  AclRuntime runtime;
  std::string library_path;
  int device_count = 0;
  // Devices some thread has bound with aclrtSetDevice: the ones
  // SynchronizeAll must wait for.
  std::atomic<uint32_t> touched_devices{0};

  std::mutex streams_mutex;
  // [device][stream id] -> aclrtStream; [d][0] (the default stream) stays
  // nullptr until first use.
  std::array<std::vector<AclStream>, kMaxDevices> streams;

  std::mutex blocks_mutex;
  // Live aclrtMalloc blocks: start address -> (bytes, device).
  std::map<uintptr_t, std::pair<size_t, c10::DeviceIndex>> blocks;

  std::mutex fault_mutex;
  // A device fault that a free's synchronization found (the first one),
  // kept for the next synchronization to report; empty when none.
  std::string fault;
};

State& GetState();

// The runtime's functions; throws unless Init succeeded.
const AclRuntime& Runtime();

// Makes the ACL device of this thread the torch-current one: ACL calls that
// depend on the thread's device (malloc, streams, synchronization) go through
// it.
void BindThread();

// Runs ACL calls on `device` and then returns the thread to its device.
class DeviceScope {
 public:
  explicit DeviceScope(c10::DeviceIndex device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  c10::DeviceIndex saved_;
};

// Registers the PrivateUse1 hooks (device_hooks.cc); Init calls it once the
// runtime is up.
void RegisterHooks();

}  // namespace polyops::npu

#endif  // POLYOPS_NPU_DEVICE_RUNTIME_INTERNAL_H_
