// What every generated binding shares, torch or not: argument parsing,
// numbers, omitted outputs, devices, streams, the GIL and errors. No torch
// header: the eager op functions (tensor_exchange.h) and the torch.library
// kernels (torch_tensors.h) both build on it.
#ifndef POLYOPS_PYTHON_ARGUMENTS_H_
#define POLYOPS_PYTHON_ARGUMENTS_H_

#include <pybind11/pybind11.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/handle.h"
#include "core/operator.h"
#include "core/overlap.h"
#include "core/scalar_or_tensor.h"
#include "core/tensor.h"

namespace polyops::python {

namespace py = pybind11;

// An omitted output before it exists: the contiguous view polyops will
// allocate, without data. The instance cache keys on geometry only, so
// looking the op up with it validates every argument (and finds the same
// instance) before anything is allocated.
inline Tensor Placeholder(const TensorMeta& meta, const Tensor& like) {
  int64_t strides[kMaxDims] = {};
  int64_t stride = 1;
  for (int d = meta.ndim - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= std::max<int64_t>(meta.shape[d], 1);  // as torch::empty does
  }
  return Tensor::FromParts(nullptr, meta.ndim, meta.shape, strides, meta.dtype,
                           like.device());
}

// An `.out` overload does not declare an optional input written (rotary's
// key), so the output that would alias it must be given with it.
inline void CheckAliasGiven(bool input_given, bool output_given,
                            const char* qualified, const char* op,
                            const char* input, const char* output) {
  POLYOPS_CHECK(!input_given || output_given, "torch.ops.polyops.", qualified,
                ": ", output, " is required when ", input,
                " is given (use torch.ops.polyops.", op, " to update ", input,
                " in place)");
}

// The bytes of storage a view of a non-empty tensor reaches from the
// storage's start (offset and strides in elements). The torch.library
// kernels refuse a view whose storage is shorter, or has no data: a null or
// resized-away storage would send the kernel to memory the tensor does not
// own.
inline int64_t StorageBytesNeeded(int64_t offset, int64_t ndim,
                                  const int64_t* sizes, const int64_t* strides,
                                  int64_t itemsize) {
  int64_t last = offset;
  for (int64_t d = 0; d < ndim; ++d) last += (sizes[d] - 1) * strides[d];
  return (last + 1) * itemsize;
}

inline Device PrimaryDevice(const Tensor& tensor, const char*) {
  return tensor.device();
}

inline Device PrimaryDevice(const std::vector<Tensor>& tensors,
                            const char* op) {
  POLYOPS_CHECK(!tensors.empty(), "polyops.", op,
                ": expected at least one tensor, got an empty list");
  return tensors.front().device();
}

inline void CheckDevice(const Tensor& tensor, Device device, const char* op,
                        const char* name) {
  POLYOPS_CHECK(tensor.device() == device, "polyops.", op, ": ", name,
                " is on ", DeviceTypeName(tensor.device().type), ":",
                tensor.device().index,
                " but the op runs on the device of its first tensor, ",
                DeviceTypeName(device.type), ":", device.index);
}

inline void CheckDevice(const std::optional<Tensor>& tensor, Device device,
                        const char* op, const char* name) {
  if (tensor) CheckDevice(*tensor, device, op, name);
}

inline void CheckDevice(const ScalarOrTensor& value, Device device,
                        const char* op, const char* name) {
  if (value.tensor) CheckDevice(*value.tensor, device, op, name);
}

inline void CheckDevice(const std::vector<Tensor>& tensors, Device device,
                        const char* op, const char* name) {
  for (const Tensor& tensor : tensors) CheckDevice(tensor, device, op, name);
}

inline std::string NoBackendMessage(const char* op, Device::Type type) {
  return detail::Concat("polyops.", op, " is not supported on device '",
                        DeviceTypeName(type),
                        "' because polyops was built without that backend");
}

// How torch's current device and stream of an accelerator are read and set:
// torch's C++ API, which polyops._torch_ops installs when it loads
// (torch_tensors.cc); absent, CPU ops run and the others say why they
// cannot (CUDA streams come from torch's DLPack exchange API regardless).
struct DeviceHooks {
  void* (*current_stream)(Device device, const char* op) = nullptr;
  // Makes `device` current; returns the device that was.
  Device (*exchange_device)(Device device) = nullptr;
};
DeviceHooks& GetDeviceHooks();

// What DLPack does not carry: the negative bit, autograd state, version
// counters. By default polyops._C reads them through torch's Python-level
// functions (torch >= 2.10, any version); polyops._torch_ops, loaded only
// under the torch it was built for, replaces them with direct reads of the
// TensorImpl (torch_tensors.cc), ~0.6 us less per add(out=). Same answers.
struct TensorFlags {
  bool (*is_neg)(PyObject* tensor);
  bool (*requires_grad)(PyObject* tensor);
  bool (*is_leaf)(PyObject* tensor);
  bool (*is_inference)(PyObject* tensor);
  bool (*grad_enabled)();
  bool (*inference_mode_enabled)();
  void (*bump_version)(PyObject* tensor);
};
TensorFlags& GetTensorFlags();

// cuda::SetWorkspaceAllocator when the CUDA backend is built, for
// polyops._torch_ops (type-erased: a const cuda::WorkspaceAllocator*).
void SetCudaWorkspaceAllocator(const void* allocator);

inline constexpr const char* kOpsTableCapsule = "polyops._C._ops_table";

// torch's current stream of an accelerator device, as the runtime's native
// handle. Fetched at every call, never cached: a handle kept across torch
// ops can run ahead of work torch still queues.
void* CurrentStream(Device device, const char* op);

// Makes the tensors' device current for the call (torch's device guard):
// the kernels and runtime calls run there, so npu:1 tensors run on device 1.
class DeviceScope {
 public:
  DeviceScope(Device device, const char* op) {
    if (device.type != Device::Type::kCpu) Enter(device, op);
  }
  ~DeviceScope() {
    if (previous_) Leave();
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  void Enter(Device device, const char* op);
  void Leave() noexcept;

  std::optional<Device> previous_;
};

// CPU kernels run on the calling thread and ignore `stream`; accelerator
// kernels run on `stream`, default: torch's current stream of the device.
inline Handle MakeHandle(Device device, std::optional<int64_t> stream,
                         const char* op) {
  Handle handle;
  handle.device = device;
  if (stream) {
    handle.stream = reinterpret_cast<void*>(*stream);
  } else if (device.type != Device::Type::kCpu) {
    handle.stream = CurrentStream(device, op);
  }
  return handle;
}

// Releasing and re-taking the GIL costs more than a tiny kernel; release it
// only when the kernel has real work, so other Python threads run meanwhile.
inline bool WorthReleasingGil(const Tensor& tensor) {
  return tensor.numel() * tensor.element_size() >= (256 << 10);
}

inline bool WorthReleasingGil(const std::vector<Tensor>& tensors) {
  return !tensors.empty() && WorthReleasingGil(tensors.front());
}

template <typename Fn>
void RunKernel(bool release_gil, Fn&& fn) {
  if (release_gil) {
    py::gil_scoped_release release;
    fn();
  } else {
    fn();
  }
}

// A call that does not fit the op's signature (wrong argument count, unknown
// keyword, wrong Python type): TypeError, as Python itself raises.
class ArgumentError : public Error {
 public:
  using Error::Error;
};

// The op functions are METH_FASTCALL functions with their own argument
// parsing: pybind11's generic dispatcher costs more than 1 us per call with
// keyword arguments, several times the whole kernel on small tensors.
struct Signature {
  const char* op;
  const char* const* names;  // the op's parameters, then the three common ones
  int count;
  int num_positional;
  PyObject** interned;  // `count` interned names, filled by InternNames
};

void InternNames(Signature& signature);

// Sorts positional and keyword arguments into values[0..count) (borrowed,
// nullptr where not given).
void ParseArguments(const Signature& signature, PyObject* const* args,
                    Py_ssize_t nargs, PyObject* kwnames, PyObject** values);

inline PyObject* Given(PyObject* value) {
  return value == Py_None ? nullptr : value;
}

inline PyObject* Required(PyObject* value, const Signature& signature,
                          int index) {
  if (!value) {
    throw ArgumentError(detail::Concat("polyops.", signature.op,
                                       "() missing required argument '",
                                       signature.names[index], "'"));
  }
  return value;
}

[[noreturn]] void ThrowWrongType(PyObject* value, const char* op,
                                 const char* name, const char* expected);

double ArgDouble(PyObject* value, const char* op, const char* name);
int64_t ArgInt(PyObject* value, const char* op, const char* name);
bool ArgBool(PyObject* value, const char* op, const char* name);

// implementation="<name>": the index of the slot of that name on `device`
// (docs/user/api.md). Giving implementation_index too is a TypeError.
int64_t ArgImplementation(PyObject* value, std::optional<int64_t> index,
                          const OpState& state, Device device);

// An output that defaults to an input (in place): the caller's output if
// given, else that input's object (None stays None).
inline PyObject* ReturnAlias(PyObject* given, PyObject* input) {
  PyObject* result = given ? given : (input ? input : Py_None);
  Py_INCREF(result);
  return result;
}

// Sets the Python error for the exception being handled.
void SetPythonError();

// One torch.ops.polyops overload (generated: every module that registers or
// describes the schemas has the same table).
struct TorchOverload {
  const char* op;
  const char* overload;  // "" is the default overload
  const char* schema;
  std::vector<std::string> returns;  // the outputs it allocates and returns
};

const std::vector<TorchOverload>& TorchOverloads();

// polyops' errors -> ValueError / NotImplementedError / RuntimeError for the
// calling module's pybind11 functions. Module-local: a global translator
// would also see every exception of torch's own pybind11 functions (pybind11
// shares its internals across modules) and turn c10::ValueError & co. into
// RuntimeError.
void RegisterErrorTranslator();

void BindOps(py::module_& module);

}  // namespace polyops::python

#endif  // POLYOPS_PYTHON_ARGUMENTS_H_
