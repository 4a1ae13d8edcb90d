// What the generated bindings use to turn torch tensors into polyops views,
// allocate omitted outputs, and run a kernel. Only the bindings include
// torch headers; the core and the kernels never do.
#ifndef POLYOPS_PYTHON_BINDING_SUPPORT_H_
#define POLYOPS_PYTHON_BINDING_SUPPORT_H_

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/handle.h"
#include "core/operator.h"
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
      throw InvalidArgument(detail::Concat(
          "polyops.", op, ": ", name, " is on device '", device.str(),
          "'; polyops runs on cpu, cuda and npu tensors"));
  }
}

// The hot path: a handful of inline reads of the TensorImpl.
inline Tensor ToView(const at::Tensor& tensor, const char* op,
                     const char* name) {
  POLYOPS_CHECK(tensor.defined(), "polyops.", op, ": ", name,
                " is an undefined tensor");
  POLYOPS_CHECK(tensor.layout() == c10::kStrided, "polyops.", op, ": ", name,
                " must be a dense (strided) tensor, got layout ",
                tensor.layout());
  const int64_t ndim = tensor.dim();
  POLYOPS_CHECK(ndim <= kMaxDims, "polyops.", op, ": ", name, " has ", ndim,
                " dims; polyops supports at most ", kMaxDims);
  return Tensor::FromParts(tensor.data_ptr(), static_cast<int>(ndim),
                           tensor.sizes().data(), tensor.strides().data(),
                           ToDataType(tensor.scalar_type(), op, name),
                           ToDevice(tensor.device(), op, name));
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

inline at::Tensor Allocate(const TensorMeta& meta, const at::Tensor& like) {
  return at::empty(c10::IntArrayRef(meta.shape, meta.ndim),
                   like.options().dtype(ToScalarType(meta.dtype)));
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

inline void CheckOnHost(const std::optional<Tensor>& tensor, const char* op,
                        const char* name) {
  POLYOPS_CHECK(!tensor || tensor->device().type == Device::Type::kCpu,
                "polyops.", op, ": ", name,
                " must be a CPU tensor, got one on ",
                DeviceTypeName(tensor->device().type));
}

inline std::string NoBackendMessage(const char* op, Device::Type type) {
  return detail::Concat("polyops.", op, " is not supported on device '",
                        DeviceTypeName(type),
                        "' because polyops was built without that backend");
}

// CPU kernels run on the calling thread and ignore `stream`.
inline Handle MakeHandle(Device device, std::optional<int64_t> stream) {
  Handle handle;
  handle.device = device;
  handle.stream = stream ? reinterpret_cast<void*>(*stream) : nullptr;
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
  return THPVariable_Unpack(value);
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
