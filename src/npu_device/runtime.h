// The "npu" test device: a torch PrivateUse1 backend whose memory, copies and
// streams go through the CANN runtime C ABI (libascendcl.so). Under test the
// library is the CANN test double (host memory posing as device memory); the
// code never links it, it resolves the symbols with dlopen/dlsym in Init(), so
// the same build runs against any library with the real CANN signatures.
//
// Everything here throws c10::Error on failure (a Python RuntimeError once it
// crosses into Python); nothing aborts.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <c10/core/Storage.h>
#include <c10/core/Stream.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace polyops::npu {

// CANN: typedef void* aclrtStream; typedef int aclError; (acl_base_rt.h).
using AclStream = void*;
using AclError = int;

// aclrtMemcpyKind (acl_rt.h). Only the four plain kinds are used.
enum class MemcpyKind : int {
  kHostToHost = 0,
  kHostToDevice = 1,
  kDeviceToHost = 2,
  kDeviceToDevice = 3,
};

// Most devices the guard accepts; Init() refuses a larger device count.
constexpr int kMaxDevices = 16;

// Loads `library_path` (a libascendcl.so), resolves the runtime symbols, calls
// aclInit (tolerating ACL_ERROR_REPEAT_INITIALIZE) and aclrtSetDevice(0), and
// registers the PrivateUse1 hooks. Once per process: a second call with the
// same path and count is a no-op, anything else throws.
void Init(const std::string& library_path, int device_count);
bool IsInitialized() noexcept;
const std::string& LibraryPath();

// Number of npu devices (0 before Init).
c10::DeviceIndex DeviceCount() noexcept;
// The calling thread's current npu device (0 on a new thread).
c10::DeviceIndex CurrentDevice();
// Makes `device` current on the calling thread (aclrtSetDevice when it
// changes). -1 means "the current one" and changes nothing.
void SetDevice(c10::DeviceIndex device);

// The allocator behind every npu storage (aclrtMalloc / aclrtFree).
c10::Allocator* DeviceAllocator();
// The device whose aclrtMalloc block contains `ptr`, or the current device
// when `ptr` is not one of ours.
c10::Device DeviceOfPointer(const void* ptr);
// Grows or shrinks an npu storage to `new_bytes`, keeping its contents.
void ResizeStorageBytes(c10::StorageImpl* storage, size_t new_bytes);

// Synchronous aclrtMemcpy. It is a synchronization point of the runtime: work
// queued on streams runs first. A zero `count` calls nothing.
void Memcpy(void* dst, size_t dest_max, const void* src, size_t count,
            MemcpyKind kind);

// Streams. Stream id 0 is each device's default stream; ids 1.. are streams
// made by getNewStream. Every id maps to an aclrtStream created with
// aclrtCreateStream (the default one on first use) that lives until exit.
c10::Stream CurrentStream(c10::DeviceIndex device);
// Makes `stream` current on its device for the calling thread; returns the
// stream that was current there.
c10::Stream ExchangeStream(c10::Stream stream);
c10::Stream NewStream(c10::DeviceIndex device);
AclStream StreamHandle(c10::Stream stream);
void SynchronizeStream(c10::Stream stream);
// aclrtSynchronizeDevice on `device` (-1: the current one).
void SynchronizeDevice(c10::DeviceIndex device);
// Every device and every stream this process created: what host code (the
// CPU fallback) must call before it reads device memory.
void SynchronizeAll();

}  // namespace polyops::npu

// C entry points for native code (the polyops Ascend backend) that needs the
// torch-current stream without Python. After Init() they can be found with
// dlsym(RTLD_DEFAULT, ...). Neither throws.
extern "C" {
// The aclrtStream of the calling thread's current torch stream on npu device
// `device_index` (-1: the current device); nullptr before Init or for an
// invalid index.
__attribute__((visibility("default"))) void* polyopsNpuCurrentStream(
    int device_index);
// The calling thread's current npu device index; -1 before Init.
__attribute__((visibility("default"))) int polyopsNpuCurrentDevice();
}
