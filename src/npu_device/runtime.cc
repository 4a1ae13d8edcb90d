// Runtime half of the npu test device: the dlopen'ed CANN runtime, the
// per-thread current device and streams, the allocator, the device guard, the
// PrivateUse1 hooks, the C entry points and the Python module. The aten
// kernels live in kernels.cc.
#include "npu_device/runtime.h"

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>
#include <dlfcn.h>
#include <pybind11/pybind11.h>

#include <array>
#include <atomic>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace polyops::npu {
namespace {

// ACL_ERROR_REPEAT_INITIALIZE: aclInit already ran in this process (torch_npu
// or an earlier polyops load owns it), which is fine.
constexpr AclError kAclRepeatInitialize = 100002;

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

State& GetState() {
  static State* state = new State();  // never destroyed: deleters run late
  return *state;
}

// The torch-current device of this thread, and the device this thread last
// passed to aclrtSetDevice (-1: none yet).
thread_local c10::DeviceIndex tls_device = 0;
thread_local int tls_acl_device = -1;
// The current stream id of each device for this thread (0: default stream).
thread_local std::array<c10::StreamId, kMaxDevices> tls_stream_ids{};

const AclRuntime& Runtime() {
  State& state = GetState();
  TORCH_CHECK(state.initialized.load(std::memory_order_acquire),
              "npu: the device is not initialised; call "
              "polyops._cann_double.use_cann_double() first");
  return state.runtime;
}

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

// Makes the ACL device of this thread the torch-current one: ACL calls that
// depend on the thread's device (malloc, streams, synchronization) go through
// it.
void BindThread() {
  const AclRuntime& runtime = Runtime();
  if (tls_acl_device == tls_device) return;
  CheckAcl(runtime.set_device(tls_device), "aclrtSetDevice");
  tls_acl_device = tls_device;
  GetState().touched_devices.fetch_or(1u << tls_device);
}

// Runs ACL calls on `device` and then returns the thread to its device.
class DeviceScope {
 public:
  explicit DeviceScope(c10::DeviceIndex device) : saved_(CurrentDevice()) {
    SetDevice(device);
    BindThread();
  }
  ~DeviceScope() {
    // Restoring can only fail if aclrtSetDevice failed for a device that
    // worked before; destructors must not throw, so leave the thread bound
    // lazily (the next BindThread retries).
    tls_device = saved_;
    if (tls_acl_device != saved_) {
      const AclRuntime& runtime = GetState().runtime;
      if (runtime.set_device(saved_) == 0) tls_acl_device = saved_;
    }
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  c10::DeviceIndex saved_;
};

template <typename Fn>
void Resolve(void* library, const char* name, Fn*& slot, bool required) {
  slot = reinterpret_cast<Fn*>(dlsym(library, name));
  TORCH_CHECK(slot != nullptr || !required, "npu: ", name, " is missing from ",
              GetState().library_path,
              ": not a CANN runtime library (libascendcl.so)");
}

// --- allocator ---------------------------------------------------------------

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

// --- device guard ------------------------------------------------------------

class NpuGuardImpl final : public c10::impl::DeviceGuardImplInterface {
 public:
  c10::DeviceType type() const override { return c10::DeviceType::PrivateUse1; }
  c10::Device exchangeDevice(c10::Device device) const override {
    const c10::Device old = getDevice();
    if (device.index() != old.index()) setDevice(device);
    return old;
  }
  c10::Device getDevice() const override {
    return c10::Device(c10::DeviceType::PrivateUse1, CurrentDevice());
  }
  void setDevice(c10::Device device) const override {
    TORCH_CHECK(device.is_privateuseone(), "npu: expected an npu device, got ",
                device);
    SetDevice(device.index());
  }
  void uncheckedSetDevice(c10::Device device) const noexcept override {
    // Used when a DeviceGuard restores the previous device, which was valid
    // when it was saved.
    try {
      SetDevice(device.index());
    } catch (...) {
    }
  }
  c10::Stream getStream(c10::Device device) const override {
    return CurrentStream(device.index());
  }
  c10::Stream getDefaultStream(c10::Device device) const override {
    return c10::Stream(c10::Stream::DEFAULT, device);
  }
  c10::Stream getNewStream(c10::Device device,
                           int /*priority*/) const override {
    return NewStream(device.index());
  }
  c10::Stream getStreamFromGlobalPool(c10::Device device,
                                      bool /*high_priority*/) const override {
    return NewStream(device.index());
  }
  c10::Stream exchangeStream(c10::Stream stream) const override {
    return ExchangeStream(stream);
  }
  void* getStreamNativeHandle(const c10::Stream stream) const override {
    return StreamHandle(stream);
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return DeviceCount();
  }
  // There is no aclrtStreamQuery in the contract: waiting makes the answer
  // "done" true.
  bool queryStream(const c10::Stream& stream) const override {
    SynchronizeStream(stream);
    return true;
  }
  void synchronizeStream(const c10::Stream& stream) const override {
    SynchronizeStream(stream);
  }
  void synchronizeDevice(const c10::DeviceIndex device) const override {
    SynchronizeDevice(device);
  }
  // No caching allocator: a block is freed at once, so there is nothing to
  // record.
  void recordDataPtrOnStream(const c10::DataPtr& /*data_ptr*/,
                             const c10::Stream& /*stream*/) const override {}
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, NpuGuardImpl);

// --- hooks -------------------------------------------------------------------

struct NpuHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return IsInitialized(); }
  bool hasPrimaryContext(c10::DeviceIndex /*device*/) const override {
    return IsInitialized();
  }
  c10::DeviceIndex deviceCount() const override { return DeviceCount(); }
  void setCurrentDevice(c10::DeviceIndex device) const override {
    SetDevice(device);
  }
  c10::DeviceIndex getCurrentDevice() const override { return CurrentDevice(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    const c10::DeviceIndex old = CurrentDevice();
    SetDevice(device);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    return exchangeDevice(device);
  }
  at::Device getDeviceFromPtr(void* data) const override {
    return DeviceOfPointer(data);
  }
  bool isPinnedPtr(const void* /*data*/) const override { return false; }
  // Non-blocking device-to-host copies ask for pinned host memory. The
  // contract has no aclrtMallocHost and every copy is synchronous anyway, so
  // plain host memory serves.
  c10::Allocator* getPinnedMemoryAllocator() const override {
    return c10::GetAllocator(c10::DeviceType::CPU);
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage,
                              size_t new_bytes) const override {
    ResizeStorageBytes(storage.unsafeGetStorageImpl(), new_bytes);
  }
};

}  // namespace

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
  at::RegisterPrivateUse1HooksInterface(new NpuHooks());
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

// --- Python module -----------------------------------------------------------

namespace {

namespace py = pybind11;
namespace npu = polyops::npu;

c10::Stream MakeStream(int device, int64_t stream_id) {
  return c10::Stream(c10::Stream::UNSAFE,
                     c10::Device(c10::DeviceType::PrivateUse1,
                                 static_cast<c10::DeviceIndex>(device)),
                     stream_id);
}

}  // namespace

PYBIND11_MODULE(_npu_device, m) {
  m.doc() =
      "The 'npu' test device (torch PrivateUse1) over a CANN runtime library. "
      "Use polyops._cann_double.use_cann_double() rather than this module.";
  // c10::Error's what() carries a C++ backtrace; Python callers get the
  // message alone, as from torch's own bindings. Module-local: pybind11
  // shares its translator registry between extension modules, so a global
  // translator would also turn torch's own c10::ValueError, IndexError & co.
  // (and polyops' errors raised through torch.ops) into RuntimeError.
  py::register_local_exception_translator([](std::exception_ptr error) {
    try {
      if (error) std::rethrow_exception(error);
    } catch (const c10::Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what_without_backtrace());
    }
  });
  // c10::DeviceType::PrivateUse1, for torch.Stream(device_type=...).
  m.attr("DEVICE_TYPE") = static_cast<int>(c10::DeviceType::PrivateUse1);
  m.def("init", &npu::Init, py::arg("library_path"), py::arg("device_count"),
        "Load the CANN runtime at library_path and bring up device_count npu "
        "devices (once per process).");
  m.def("is_initialized", &npu::IsInitialized);
  m.def("library_path", &npu::LibraryPath);
  m.def("device_count", [] { return static_cast<int>(npu::DeviceCount()); });
  m.def("current_device",
        [] { return static_cast<int>(npu::CurrentDevice()); });
  m.def("set_device", [](int device) {
    npu::SetDevice(static_cast<c10::DeviceIndex>(device));
  });
  m.def(
      "synchronize",
      [](int device) {
        npu::SynchronizeDevice(static_cast<c10::DeviceIndex>(device));
      },
      py::arg("device") = -1);
  m.def("synchronize_all", &npu::SynchronizeAll);
  m.def(
      "current_stream",
      [](int device) {
        const c10::Stream stream =
            npu::CurrentStream(static_cast<c10::DeviceIndex>(device));
        return py::make_tuple(static_cast<int>(stream.device_index()),
                              stream.id());
      },
      py::arg("device") = -1,
      "(device index, stream id) of the thread's current stream.");
  m.def(
      "set_stream",
      [](int device, int64_t stream_id) {
        return npu::ExchangeStream(MakeStream(device, stream_id)).id();
      },
      "Make stream_id current on device; returns the previous stream id.");
  m.def("new_stream", [](int device) {
    return npu::NewStream(static_cast<c10::DeviceIndex>(device)).id();
  });
  m.def(
      "stream_handle",
      [](int device, int64_t stream_id) {
        return reinterpret_cast<uintptr_t>(
            npu::StreamHandle(MakeStream(device, stream_id)));
      },
      "The aclrtStream of a stream, as an integer.");
  m.def("synchronize_stream", [](int device, int64_t stream_id) {
    npu::SynchronizeStream(MakeStream(device, stream_id));
  });
}
