// What the generated bindings use to turn torch tensors into polyops views,
// allocate omitted outputs, and run a kernel. Only the bindings include
// torch headers; the core and the kernels never do.
#ifndef POLYOPS_PYTHON_BINDING_SUPPORT_H_
#define POLYOPS_PYTHON_BINDING_SUPPORT_H_

#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <optional>
#include <stdexcept>
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

inline std::optional<DataType> FromScalarType(at::ScalarType type) {
  switch (type) {
    case at::kBool:
      return DataType::kBool;
    case at::kChar:
      return DataType::kInt8;
    case at::kShort:
      return DataType::kInt16;
    case at::kInt:
      return DataType::kInt32;
    case at::kLong:
      return DataType::kInt64;
    case at::kByte:
      return DataType::kUInt8;
    case at::kHalf:
      return DataType::kFloat16;
    case at::kBFloat16:
      return DataType::kBFloat16;
    case at::kFloat:
      return DataType::kFloat32;
    case at::kDouble:
      return DataType::kFloat64;
    default:
      return std::nullopt;
  }
}

inline at::ScalarType ToScalarType(DataType dtype) {
  switch (dtype) {
    case DataType::kBool:
      return at::kBool;
    case DataType::kInt8:
      return at::kChar;
    case DataType::kInt16:
      return at::kShort;
    case DataType::kInt32:
      return at::kInt;
    case DataType::kInt64:
      return at::kLong;
    case DataType::kUInt8:
      return at::kByte;
    case DataType::kFloat16:
      return at::kHalf;
    case DataType::kBFloat16:
      return at::kBFloat16;
    case DataType::kFloat32:
      return at::kFloat;
    case DataType::kFloat64:
      return at::kDouble;
  }
  return at::kFloat;
}

inline DataType ToDataType(at::ScalarType type, const char* op,
                           const char* name) {
  const std::optional<DataType> dtype = FromScalarType(type);
  POLYOPS_CHECK_T(dtype.has_value(), NotImplemented, "polyops.", op,
                  " is not supported for ", name, "=", c10::toString(type),
                  " because polyops handles bool, int8/16/32/64, uint8, "
                  "float16, bfloat16, float32 and float64 only");
  return *dtype;
}

inline Device ToDevice(const c10::Device& device, const char* op,
                       const char* name) {
  switch (device.type()) {
    case c10::DeviceType::CPU:
      return Device{Device::Type::kCpu, 0};
    case c10::DeviceType::CUDA:
      return Device{Device::Type::kCuda, device.index()};
    case c10::DeviceType::PrivateUse1:
      return Device{Device::Type::kAscend, device.index()};
    default:
      throw NotImplemented(detail::Concat(
          "polyops.", op, " is not supported for ", name, " on device '",
          device.str(), "' because polyops runs on cpu, cuda and npu tensors",
          device.type() == c10::DeviceType::Meta
              ? " (meta tensors have no data; torch.compile traces polyops "
                "through torch.ops.polyops, whose fake kernels handle them)"
              : ""));
  }
}

// Tensors whose memory a kernel must not read directly: wrappers that
// dispatch elsewhere (subclasses with __torch_dispatch__ such as
// FakeTensor, functionalization, vmap, torch.func transforms, nested
// tensors) and views whose math bits say the raw values are not the values
// (negated, conjugated).
inline c10::DispatchKeySet UnsupportedKeys() {
  return c10::DispatchKeySet({
      c10::DispatchKey::Python,
      c10::DispatchKey::PythonTLSSnapshot,
      c10::DispatchKey::Functionalize,
      c10::DispatchKey::FuncTorchBatched,
      c10::DispatchKey::BatchedNestedTensor,
      c10::DispatchKey::FuncTorchGradWrapper,
      c10::DispatchKey::NestedTensor,
      c10::DispatchKey::Negative,
      c10::DispatchKey::Conjugate,
  });
}

// Why `tensor` cannot be read as plain strided memory (the slow path of
// ToView, taken only when a check fails).
[[noreturn]] void ThrowUnsupportedTensor(const at::Tensor& tensor,
                                         const char* op, const char* name);

// The hot path: a handful of inline reads of the TensorImpl.
inline Tensor ToView(const at::Tensor& tensor, const char* op,
                     const char* name) {
  POLYOPS_CHECK(tensor.defined(), "polyops.", op, ": ", name,
                " is an undefined tensor");
  const c10::TensorImpl* impl = tensor.unsafeGetTensorImpl();
  if (impl->key_set().has_any(UnsupportedKeys()) ||
      tensor.layout() != c10::kStrided || !impl->has_storage()) {
    ThrowUnsupportedTensor(tensor, op, name);
  }
  const int64_t ndim = tensor.dim();
  POLYOPS_CHECK(ndim <= kMaxDims, "polyops.", op, ": ", name, " has ", ndim,
                " dims; polyops supports at most ", kMaxDims);
  const Device device = ToDevice(tensor.device(), op, name);
  const DataType dtype = ToDataType(tensor.scalar_type(), op, name);
  void* data = tensor.data_ptr();
  if (impl->numel() > 0) {
    // The view must lie inside its storage: a null or resized-away storage
    // would otherwise send the kernel to memory the tensor does not own.
    int64_t last = impl->storage_offset();
    for (int64_t d = 0; d < ndim; ++d) {
      last += (impl->sizes()[d] - 1) * impl->strides()[d];
    }
    const size_t needed = static_cast<size_t>(last + 1) * impl->itemsize();
    if (!data || impl->storage().nbytes() < needed) {
      ThrowUnsupportedTensor(tensor, op, name);
    }
  }
  return Tensor::FromParts(data, static_cast<int>(ndim), tensor.sizes().data(),
                           tensor.strides().data(), dtype, device)
      .WithUnitStridesNormalized();
}

inline std::optional<Tensor> ToOptionalView(
    const std::optional<at::Tensor>& tensor, const char* op, const char* name) {
  if (!tensor) return std::nullopt;
  return ToView(*tensor, op, name);
}

inline std::vector<Tensor> ToViews(c10::ArrayRef<at::Tensor> tensors,
                                   const char* op, const char* name) {
  std::vector<Tensor> views;
  views.reserve(tensors.size());
  for (const at::Tensor& tensor : tensors)
    views.push_back(ToView(tensor, op, name));
  return views;
}

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

// Allocates the placeholder's tensor and points the view at it.
inline at::Tensor Allocate(std::optional<Tensor>& view,
                           const at::Tensor& like) {
  at::Tensor tensor =
      at::empty(c10::IntArrayRef(view->shape(), view->ndim()),
                like.options().dtype(ToScalarType(view->dtype())));
  view = view->WithData(tensor.data_ptr());
  return tensor;
}

// --- autograd ----------------------------------------------------------------
// polyops has no autograd formulas (docs/api.md "Autograd"). With grad mode
// on, a tensor that requires grad is refused rather than given a detached
// result; every tensor an op writes gets its version bumped, as torch's
// in-place ops do, so a backward through overwritten values raises.

// A tensor the op will write: refused where torch refuses an in-place write.
inline void CheckWritable(const at::Tensor& tensor, const char* op,
                          const char* name) {
  if (tensor.is_inference() && !c10::InferenceMode::is_enabled()) {
    throw std::runtime_error(detail::Concat(
        "polyops.", op, ": ", name,
        " is an inference tensor; in-place update to an inference tensor "
        "outside InferenceMode is not allowed (as in torch)"));
  }
  if (at::GradMode::is_enabled() && tensor.requires_grad() &&
      tensor.is_leaf()) {
    throw std::runtime_error(detail::Concat(
        "polyops.", op, ": ", name,
        " is a leaf tensor that requires grad and cannot be written in "
        "place (as in torch); write under torch.no_grad() or pass a "
        "tensor that does not require grad"));
  }
}
inline void CheckWritable(const std::optional<at::Tensor>& tensor,
                          const char* op, const char* name) {
  if (tensor) CheckWritable(*tensor, op, name);
}

inline void CheckNoGrad(const at::Tensor& tensor, const char* op,
                        const char* name) {
  POLYOPS_CHECK_T(!(tensor.requires_grad() && at::GradMode::is_enabled()),
                  NotImplemented, "polyops.", op,
                  " does not support autograd: ", name,
                  " requires grad and grad mode is on; call it under "
                  "torch.no_grad() or torch.inference_mode(), or pass ",
                  name, ".detach()");
}
inline void CheckNoGrad(const std::optional<at::Tensor>& tensor, const char* op,
                        const char* name) {
  if (tensor) CheckNoGrad(*tensor, op, name);
}
inline void CheckNoGrad(c10::ArrayRef<at::Tensor> tensors, const char* op,
                        const char* name) {
  for (const at::Tensor& tensor : tensors) CheckNoGrad(tensor, op, name);
}

inline void BumpVersion(const at::Tensor& tensor) {
  tensor.unsafeGetTensorImpl()->bump_version();
}
inline void BumpVersion(const std::optional<at::Tensor>& tensor) {
  if (tensor) BumpVersion(*tensor);
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

inline c10::Device ToTorchDevice(Device device) {
  const auto index = static_cast<c10::DeviceIndex>(device.index);
  switch (device.type) {
    case Device::Type::kCuda:
      return c10::Device(c10::DeviceType::CUDA, index);
    case Device::Type::kAscend:
      return c10::Device(c10::DeviceType::PrivateUse1, index);
    default:
      return c10::Device(c10::DeviceType::CPU);
  }
}

// torch's current stream of an accelerator device, through its registered
// device guard (torch_npu's or polyops' test "npu" device for PrivateUse1),
// as the runtime's native handle. Fetched at every call, never cached: a
// handle kept across torch ops can run ahead of work torch still queues.
void* CurrentStream(Device device, const char* op);

// Makes the tensors' device current for the call (torch's device guard):
// the kernels and runtime calls run there, so npu:1 tensors run on device 1.
class DeviceScope {
 public:
  explicit DeviceScope(Device device) {
    if (device.type != Device::Type::kCpu) {
      guard_.reset_device(ToTorchDevice(device));
    }
  }

 private:
  c10::OptionalDeviceGuard guard_;
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
  const char* const* names;  // the op's parameters, then the two common ones
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

inline const at::Tensor& ArgTensor(PyObject* value, const char* op,
                                   const char* name) {
  if (!THPVariable_Check(value))
    ThrowWrongType(value, op, name, "a torch.Tensor");
  const at::Tensor& tensor = THPVariable_Unpack(value);
  if (tensor.unsafeGetTensorImpl()->key_set().has(c10::DispatchKey::Python)) {
    throw NotImplemented(detail::Concat(
        "polyops.", op, " is not supported for ", name, " of type ",
        Py_TYPE(value)->tp_name,
        " because it is a tensor subclass with __torch_dispatch__ (such as "
        "FakeTensor or FunctionalTensor) whose data polyops cannot read; "
        "use torch.ops.polyops.",
        op, ", which torch dispatches for them"));
  }
  return tensor;
}

// The tensor of a number-or-tensor argument, if it is one.
inline const at::Tensor* TensorOrNull(PyObject* value) {
  return value && THPVariable_Check(value) ? &THPVariable_Unpack(value)
                                           : nullptr;
}

inline const at::Tensor* ArgOptionalTensor(PyObject* value, const char* op,
                                           const char* name) {
  return value ? &ArgTensor(value, op, name) : nullptr;
}
inline std::optional<Tensor> ToOptionalView(const at::Tensor* tensor,
                                            const char* op, const char* name) {
  if (!tensor) return std::nullopt;
  return ToView(*tensor, op, name);
}
inline void CheckWritable(const at::Tensor* tensor, const char* op,
                          const char* name) {
  if (tensor) CheckWritable(*tensor, op, name);
}
inline void CheckNoGrad(const at::Tensor* tensor, const char* op,
                        const char* name) {
  if (tensor) CheckNoGrad(*tensor, op, name);
}
inline void BumpVersion(const at::Tensor* tensor) {
  if (tensor) BumpVersion(*tensor);
}

double ArgDouble(PyObject* value, const char* op, const char* name);
int64_t ArgInt(PyObject* value, const char* op, const char* name);
bool ArgBool(PyObject* value, const char* op, const char* name);
at::ScalarType ArgDtype(PyObject* value, const char* op, const char* name);
std::vector<at::Tensor> ArgTensorList(PyObject* value, const char* op,
                                      const char* name);

// A number, or a tensor of per-row values.
ScalarOrTensor ArgScalarOrTensor(PyObject* value, const char* op,
                                 const char* name);

// An output that defaults to an input (in place): the caller's output if
// given, else that input's object (None stays None).
inline PyObject* ReturnAlias(PyObject* given, PyObject* input) {
  PyObject* result = given ? given : (input ? input : Py_None);
  Py_INCREF(result);
  return result;
}

// A tensor the caller passed is returned as the same Python object; one
// polyops allocated is wrapped.
inline PyObject* ReturnTensor(PyObject* given, at::Tensor& allocated) {
  if (given) {
    Py_INCREF(given);
    return given;
  }
  return THPVariable_Wrap(std::move(allocated));
}

// Sets the Python error for the exception being handled.
void SetPythonError();

void BindOps(py::module_& module);

}  // namespace polyops::python

#endif  // POLYOPS_PYTHON_BINDING_SUPPORT_H_
