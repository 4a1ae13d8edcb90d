// How the eager op functions (polyops.<op>, generated bindings.cc) read torch
// tensors without torch's C++ API: the DLPack C exchange API that torch
// >= 2.10 publishes (python/dlpack.h) for data, shape, strides, dtype and
// device, and torch's own Python-level functions, called through cached C
// entry points, for what DLPack does not carry (the negative bit, autograd
// state, version counters). A failed check goes to the slow path
// (polyops/_tensor_errors.py), which names the reason. docs/user/torch.md.
#ifndef POLYOPS_PYTHON_TENSOR_EXCHANGE_H_
#define POLYOPS_PYTHON_TENSOR_EXCHANGE_H_

#include <optional>
#include <vector>

#include "python/arguments.h"

namespace polyops::python {

// A tensor argument: the caller's torch.Tensor (borrowed), or none.
struct TensorArg {
  PyObject* object = nullptr;
  explicit operator bool() const { return object != nullptr; }
};

// Looks up the exchange API and torch's entry points; `import polyops._C`
// calls it once. Raises ImportError when torch lacks them (torch < 2.10).
void InitTensorExchange();

// A torch.Tensor (or a subclass without __torch_dispatch__), else TypeError.
TensorArg ArgTensor(PyObject* value, const char* op, const char* name);
inline TensorArg ArgOptionalTensor(PyObject* value, const char* op,
                                   const char* name) {
  return value ? ArgTensor(value, op, name) : TensorArg{};
}
std::vector<TensorArg> ArgTensorList(PyObject* value, const char* op,
                                     const char* name);

// The tensor of a number-or-tensor argument, if it is one (for the autograd
// checks; ArgScalarOrTensor reads it).
TensorArg TensorOrNull(PyObject* value);

// The polyops view of a tensor: refused (NotImplementedError, ValueError)
// when its memory is not plain strided data polyops can read.
Tensor ToView(TensorArg tensor, const char* op, const char* name);
inline std::optional<Tensor> ToOptionalView(TensorArg tensor, const char* op,
                                            const char* name) {
  if (!tensor) return std::nullopt;
  return ToView(tensor, op, name);
}
std::vector<Tensor> ToViews(const std::vector<TensorArg>& tensors,
                            const char* op, const char* name);

ScalarOrTensor ArgScalarOrTensor(PyObject* value, const char* op,
                                 const char* name);
DataType ArgDtype(PyObject* value, const char* op, const char* name);
// torch's dtype object for `dtype` (e.g. torch.float32).
py::object DtypeObject(DataType dtype);

// Allocates the placeholder's tensor through torch (the exchange API's
// allocator: torch's caching allocators) and points the view at it.
py::object Allocate(std::optional<Tensor>& view, TensorArg like);

// A tensor the caller passed is returned as the same Python object; one
// polyops allocated is handed over.
inline PyObject* ReturnTensor(PyObject* given, py::object& allocated) {
  if (given) {
    Py_INCREF(given);
    return given;
  }
  return allocated.release().ptr();
}

// TensorFlags (arguments.h) through torch's Python-level functions: the
// default, and what _C._use_portable_tensor_flags() restores for tests.
void UsePortableTensorFlags();

// --- autograd ----------------------------------------------------------------
// polyops has no autograd formulas (docs/user/api.md "Autograd"). With grad
// mode on, a tensor that requires grad is refused rather than given a detached
// result; every tensor an op writes gets its version bumped, as torch's
// in-place ops do, so a backward through overwritten values raises.

// torch's grad mode, read once per call.
struct GradState {
  bool enabled;
};
GradState CurrentGradState();

// A tensor the op will write: refused where torch refuses an in-place write.
void CheckWritable(GradState grad, TensorArg tensor, const char* op,
                   const char* name);
void CheckNoGrad(GradState grad, TensorArg tensor, const char* op,
                 const char* name);
inline void CheckNoGrad(GradState grad, const std::vector<TensorArg>& tensors,
                        const char* op, const char* name) {
  for (TensorArg tensor : tensors) CheckNoGrad(grad, tensor, op, name);
}
void BumpVersion(TensorArg tensor);

}  // namespace polyops::python

#endif  // POLYOPS_PYTHON_TENSOR_EXCHANGE_H_
