// Runtime half of the npu test device: the dlopen'ed CANN runtime, the
// per-thread current device and streams, the C entry points. The allocator
// lives in allocator.cc, the device guard and PrivateUse1 hooks in
// device_hooks.cc, the Python module in module.cc and the aten kernels in
// kernels.cc.
#include "npu_device/runtime.h"

#include <c10/util/Exception.h>
#include <dlfcn.h>

#include <array>
#include <atomic>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "npu_device/runtime_internal.h"

namespace polyops::npu {
namespace {

// ACL_ERROR_REPEAT_INITIALIZE: aclInit already ran in this process (torch_npu
// or an earlier polyops load owns it), which is fine.
constexpr AclError kAclRepeatInitialize = 100002;

// The torch-current device of this thread, and the device this thread last
// passed to aclrtSetDevice (-1: none yet).
thread_local c10::DeviceIndex tls_device = 0;
thread_local int tls_acl_device = -1;
// The current stream id of each device for this thread (0: default stream).
thread_local std::array<c10::StreamId, kMaxDevices> tls_stream_ids{};

[[noreturn]] void ThrowAcl(AclError status, const char* what) {
  const AclRuntime& runtime = GetState().runtime;
  const char* message =
      runtime.recent_err_msg != nullptr ? runtime.recent_err_msg() : nullptr;
  TORCH_CHECK(false, "npu: ", what, " failed with aclError ", status, ": ",
              message != nullptr && *message != '\0'
                  ? message
                  : "(aclGetRecentErrMsg gave no message)");
}

inline void CheckAcl(AclError status, const char* what) {
  if (status != 0) ThrowAcl(status, what);
}

// Called by every synchronization point: raises (once) the fault a free's
// synchronization found, as the chip reports a fault of earlier work at
// the next synchronization. Checked first, so it is not mistaken for a
// fault of work queued since.
void RaisePendingFault() {
  State& state = GetState();
  std::string fault;
  {
    std::lock_guard<std::mutex> lock(state.fault_mutex);
    fault.swap(state.fault);
  }
  TORCH_CHECK(fault.empty(), fault);
}

void CheckDevice(c10::DeviceIndex device) {
  const int count = GetState().device_count;
  TORCH_CHECK(device >= 0 && device < count, "npu: invalid device index ",
              static_cast<int>(device), " (", count, " npu device",
              count == 1 ? "" : "s", ")");
}

template <typename Fn>
void Resolve(void* library, const char* name, Fn*& slot, bool required) {
  slot = reinterpret_cast<Fn*>(dlsym(library, name));
  TORCH_CHECK(slot != nullptr || !required, "npu: ", name, " is missing from ",
              GetState().library_path,
              ": not a CANN runtime library (libascendcl.so)");
}

}  // namespace

State& GetState() {
  static State* state = new State();  // never destroyed: deleters run late
  return *state;
}

const AclRuntime& Runtime() {
  State& state = GetState();
  TORCH_CHECK(state.initialized.load(std::memory_order_acquire),
              "npu: the device is not initialised; call "
              "polyops._cann_double.use_cann_double() first");
  return state.runtime;
}

void BindThread() {
  const AclRuntime& runtime = Runtime();
  if (tls_acl_device == tls_device) return;
  CheckAcl(runtime.set_device(tls_device), "aclrtSetDevice");
  tls_acl_device = tls_device;
  GetState().touched_devices.fetch_or(1u << tls_device);
}

DeviceScope::DeviceScope(c10::DeviceIndex device) : saved_(CurrentDevice()) {
  SetDevice(device);
  BindThread();
}

DeviceScope::~DeviceScope() {
  // Restoring can only fail if aclrtSetDevice failed for a device that
  // worked before; destructors must not throw, so leave the thread bound
  // lazily (the next BindThread retries).
  tls_device = saved_;
  if (tls_acl_device != saved_) {
    const AclRuntime& runtime = GetState().runtime;
    if (runtime.set_device(saved_) == 0) tls_acl_device = saved_;
  }
}

// --- public functions --------------------------------------------------------

void Init(const std::string& library_path, int device_count) {
  State& state = GetState();
  std::lock_guard<std::mutex> lock(state.init_mutex);
  if (state.initialized.load()) {
    TORCH_CHECK(library_path == state.library_path &&
                    device_count == state.device_count,
                "npu: the device is already initialised with ",
                state.library_path, " and ", state.device_count,
                " devices; a different runtime needs a fresh process");
    return;
  }
  TORCH_CHECK(device_count >= 1 && device_count <= kMaxDevices,
              "npu: device_count must be in [1, ", kMaxDevices, "], got ",
              device_count);
  // RTLD_GLOBAL: libraries loaded later (the double's libnnopbase.so and
  // libopapi.so, the polyops Ascend backend) bind to this same runtime.
  void* library = dlopen(library_path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (library == nullptr) {
    const char* error = dlerror();
    TORCH_CHECK(false, "npu: cannot load the CANN runtime ", library_path, ": ",
                error != nullptr ? error : "unknown dlopen error");
  }
  state.library_path = library_path;
  AclRuntime runtime;
  Resolve(library, "aclInit", runtime.init, true);
  Resolve(library, "aclrtSetDevice", runtime.set_device, true);
  Resolve(library, "aclrtMalloc", runtime.malloc, true);
  Resolve(library, "aclrtFree", runtime.free, true);
  Resolve(library, "aclrtMemcpy", runtime.memcpy, true);
  Resolve(library, "aclrtCreateStream", runtime.create_stream, true);
  Resolve(library, "aclrtSynchronizeStream", runtime.synchronize_stream, true);
  Resolve(library, "aclrtSynchronizeDevice", runtime.synchronize_device, true);
  Resolve(library, "aclGetRecentErrMsg", runtime.recent_err_msg, false);
  state.runtime = runtime;

  const AclError init_status = runtime.init(nullptr);
  if (init_status != kAclRepeatInitialize) CheckAcl(init_status, "aclInit");
  state.device_count = device_count;
  for (auto& device_streams : state.streams) device_streams.assign(1, nullptr);
  state.initialized.store(true, std::memory_order_release);
  try {
    tls_device = 0;
    BindThread();
  } catch (...) {
    state.initialized.store(false);
    throw;
  }

  // Make polyopsNpuCurrentStream / polyopsNpuCurrentDevice visible to
  // dlsym(RTLD_DEFAULT, ...): Python loaded this module RTLD_LOCAL.
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&polyopsNpuCurrentStream), &info) != 0 &&
      info.dli_fname != nullptr) {
    dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);
  }
  RegisterHooks();
}

bool IsInitialized() noexcept {
  return GetState().initialized.load(std::memory_order_acquire);
}

const std::string& LibraryPath() { return GetState().library_path; }

c10::DeviceIndex DeviceCount() noexcept {
  return IsInitialized()
             ? static_cast<c10::DeviceIndex>(GetState().device_count)
             : 0;
}

c10::DeviceIndex CurrentDevice() {
  Runtime();
  return tls_device;
}

void SetDevice(c10::DeviceIndex device) {
  Runtime();
  if (device == -1) return;
  CheckDevice(device);
  tls_device = device;
  BindThread();
}

void Memcpy(void* dst, size_t dest_max, const void* src, size_t count,
            MemcpyKind kind) {
  const AclRuntime& runtime = Runtime();
  if (count == 0) return;
  BindThread();
  RaisePendingFault();
  CheckAcl(runtime.memcpy(dst, dest_max, src, count, static_cast<int>(kind)),
           "aclrtMemcpy");
}

c10::Stream CurrentStream(c10::DeviceIndex device) {
  if (device == -1) device = CurrentDevice();
  Runtime();
  CheckDevice(device);
  return c10::Stream(c10::Stream::UNSAFE,
                     c10::Device(c10::DeviceType::PrivateUse1, device),
                     tls_stream_ids[device]);
}

c10::Stream ExchangeStream(c10::Stream stream) {
  StreamHandle(stream);  // validates the device and the id
  const c10::DeviceIndex device = stream.device_index();
  const c10::Stream previous = CurrentStream(device);
  tls_stream_ids[device] = stream.id();
  return previous;
}

c10::Stream NewStream(c10::DeviceIndex device) {
  if (device == -1) device = CurrentDevice();
  const AclRuntime& runtime = Runtime();
  CheckDevice(device);
  AclStream handle = nullptr;
  {
    DeviceScope scope(device);
    CheckAcl(runtime.create_stream(&handle), "aclrtCreateStream");
  }
  State& state = GetState();
  std::lock_guard<std::mutex> lock(state.streams_mutex);
  state.streams[device].push_back(handle);
  return c10::Stream(
      c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, device),
      static_cast<c10::StreamId>(state.streams[device].size() - 1));
}

AclStream StreamHandle(c10::Stream stream) {
  const AclRuntime& runtime = Runtime();
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1,
              "npu: expected an npu stream, got one on ", stream.device());
  const c10::DeviceIndex device = stream.device_index();
  CheckDevice(device);
  State& state = GetState();
  {
    std::lock_guard<std::mutex> lock(state.streams_mutex);
    const auto& handles = state.streams[device];
    TORCH_CHECK(stream.id() >= 0 &&
                    stream.id() < static_cast<c10::StreamId>(handles.size()),
                "npu: unknown stream id ", stream.id(),
                " on npu:", static_cast<int>(device));
    if (handles[stream.id()] != nullptr) return handles[stream.id()];
  }
  // The default stream is created on first use, on its device. Two threads
  // may race here; the loser's stream is synchronized and kept unused rather
  // than destroyed (destroying a stream is a sync point with no benefit).
  AclStream handle = nullptr;
  {
    DeviceScope scope(device);
    CheckAcl(runtime.create_stream(&handle), "aclrtCreateStream");
  }
  std::lock_guard<std::mutex> lock(state.streams_mutex);
  AclStream& slot = state.streams[device][0];
  if (slot == nullptr) slot = handle;
  return slot;
}

void SynchronizeStream(c10::Stream stream) {
  const AclRuntime& runtime = Runtime();
  AclStream handle = StreamHandle(stream);
  DeviceScope scope(stream.device_index());
  RaisePendingFault();
  CheckAcl(runtime.synchronize_stream(handle), "aclrtSynchronizeStream");
}

void SynchronizeDevice(c10::DeviceIndex device) {
  const AclRuntime& runtime = Runtime();
  if (device == -1) device = CurrentDevice();
  CheckDevice(device);
  DeviceScope scope(device);
  RaisePendingFault();
  CheckAcl(runtime.synchronize_device(), "aclrtSynchronizeDevice");
}

void SynchronizeAll() {
  Runtime();
  const uint32_t touched = GetState().touched_devices.load();
  for (int device = 0; device < GetState().device_count; ++device) {
    if ((touched & (1u << device)) != 0) {
      SynchronizeDevice(static_cast<c10::DeviceIndex>(device));
    }
  }
}

}  // namespace polyops::npu

// --- C entry points ----------------------------------------------------------

extern "C" void* polyopsNpuCurrentStream(int device_index) {
  try {
    return polyops::npu::StreamHandle(polyops::npu::CurrentStream(
        static_cast<c10::DeviceIndex>(device_index)));
  } catch (...) {
    return nullptr;
  }
}

extern "C" int polyopsNpuCurrentDevice() {
  if (!polyops::npu::IsInitialized()) return -1;
  return polyops::npu::CurrentDevice();
}
