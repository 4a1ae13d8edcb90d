// Argument parsing for the generated METH_FASTCALL op functions.
#include <string>

#include "python/binding_support.h"

namespace polyops::python {

void InternNames(Signature& signature) {
  for (int i = 0; i < signature.count; ++i) {
    signature.interned[i] = PyUnicode_InternFromString(signature.names[i]);
    if (!signature.interned[i]) throw py::error_already_set();
  }
}

namespace {

int FindKeyword(const Signature& signature, PyObject* keyword) {
  // Keyword names in calls are interned by CPython: pointer equality almost
  // always decides; the string compare covers names built at run time.
  for (int i = 0; i < signature.count; ++i) {
    if (signature.interned[i] == keyword) return i;
  }
  for (int i = 0; i < signature.count; ++i) {
    if (PyUnicode_Compare(signature.interned[i], keyword) == 0) return i;
  }
  return -1;
}

}  // namespace

void ParseArguments(const Signature& signature, PyObject* const* args,
                    Py_ssize_t nargs, PyObject* kwnames, PyObject** values) {
  if (nargs > signature.num_positional) {
    throw ArgumentError(detail::Concat(
        "polyops.", signature.op, "() takes at most ", signature.num_positional,
        " positional argument(s) but ", nargs, " were given"));
  }
  for (Py_ssize_t i = 0; i < nargs; ++i) values[i] = args[i];
  if (!kwnames) return;
  const Py_ssize_t num_keywords = PyTuple_GET_SIZE(kwnames);
  for (Py_ssize_t k = 0; k < num_keywords; ++k) {
    PyObject* keyword = PyTuple_GET_ITEM(kwnames, k);
    const int index = FindKeyword(signature, keyword);
    if (index < 0) {
      throw ArgumentError(detail::Concat(
          "polyops.", signature.op, "() got an unexpected keyword argument '",
          PyUnicode_AsUTF8(keyword), "'"));
    }
    if (values[index]) {
      throw ArgumentError(detail::Concat(
          "polyops.", signature.op, "() got multiple values for argument '",
          signature.names[index], "'"));
    }
    values[index] = args[nargs + k];
  }
}

void ThrowWrongType(PyObject* value, const char* op, const char* name,
                    const char* expected) {
  throw ArgumentError(detail::Concat("polyops.", op, ": ", name, " must be ",
                                     expected, ", got ",
                                     Py_TYPE(value)->tp_name));
}

double ArgDouble(PyObject* value, const char* op, const char* name) {
  if (PyFloat_CheckExact(value)) return PyFloat_AS_DOUBLE(value);
  if (!PyFloat_Check(value) && !PyLong_Check(value) &&
      !PyObject_HasAttrString(value, "__float__")) {
    ThrowWrongType(value, op, name, "a float");
  }
  const double result = PyFloat_AsDouble(value);
  if (result == -1.0 && PyErr_Occurred()) {
    if (!PyErr_ExceptionMatches(PyExc_OverflowError)) {
      throw py::error_already_set();
    }
    PyErr_Clear();  // an int beyond float64, e.g. eps=10**400
    throw InvalidArgument(detail::Concat("polyops.", op, ": ", name,
                                         " does not fit in a float64"));
  }
  return result;
}

int64_t ArgInt(PyObject* value, const char* op, const char* name) {
  // bool is an int subclass in Python, but True is not a slot or a size.
  if (PyBool_Check(value) || PyFloat_Check(value) || !PyIndex_Check(value)) {
    ThrowWrongType(value, op, name, "an int");
  }
  const long long result = PyLong_AsLongLong(value);
  if (result == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    throw InvalidArgument(
        detail::Concat("polyops.", op, ": ", name, " does not fit in int64"));
  }
  return result;
}

bool ArgBool(PyObject* value, const char* op, const char* name) {
  if (PyBool_Check(value)) return value == Py_True;
  ThrowWrongType(value, op, name, "a bool");
}

at::ScalarType ArgDtype(PyObject* value, const char* op, const char* name) {
  if (!THPDtype_Check(value)) ThrowWrongType(value, op, name, "a torch.dtype");
  return reinterpret_cast<THPDtype*>(value)->scalar_type;
}

std::vector<at::Tensor> ArgTensorList(PyObject* value, const char* op,
                                      const char* name) {
  if (!PyList_Check(value) && !PyTuple_Check(value)) {
    ThrowWrongType(value, op, name, "a list or tuple of torch.Tensor");
  }
  const Py_ssize_t size = PySequence_Fast_GET_SIZE(value);
  PyObject** items = PySequence_Fast_ITEMS(value);
  std::vector<at::Tensor> tensors;
  tensors.reserve(size);
  for (Py_ssize_t i = 0; i < size; ++i) {
    tensors.push_back(ArgTensor(items[i], op, name));
  }
  return tensors;
}

ScalarOrTensor ArgScalarOrTensor(PyObject* value, const char* op,
                                 const char* name) {
  ScalarOrTensor result;
  if (THPVariable_Check(value)) {
    result.tensor = ToView(ArgTensor(value, op, name), op, name);
  } else if (PyBool_Check(value)) {
    ThrowWrongType(value, op, name, "a number or a torch.Tensor");
  } else {
    result.scalar = ArgDouble(value, op, name);
  }
  return result;
}

void ThrowUnsupportedTensor(const at::Tensor& tensor, const char* op,
                            const char* name) {
  const c10::DispatchKeySet keys = tensor.unsafeGetTensorImpl()->key_set();
  const auto unsupported = [&](const char* kind, const char* advice) {
    throw NotImplemented(detail::Concat("polyops.", op,
                                        " is not supported for ", name,
                                        " because it is ", kind, advice));
  };
  if (keys.has(c10::DispatchKey::Negative) ||
      keys.has(c10::DispatchKey::Conjugate)) {
    unsupported(
        "a view with torch's negative or conjugate bit set (e.g. "
        "z.conj().imag), whose memory holds the values before negation",
        "; pass .resolve_neg() / .resolve_conj() of it");
  }
  if (keys.has(c10::DispatchKey::Python) ||
      keys.has(c10::DispatchKey::PythonTLSSnapshot)) {
    unsupported(
        "a tensor subclass with __torch_dispatch__ (such as FakeTensor or "
        "FunctionalTensor) whose data polyops cannot read",
        "; use torch.ops.polyops, which torch dispatches for them");
  }
  if (keys.has(c10::DispatchKey::Functionalize)) {
    unsupported("a functionalization wrapper",
                "; use torch.ops.polyops inside functionalized code");
  }
  if (keys.has(c10::DispatchKey::FuncTorchBatched) ||
      keys.has(c10::DispatchKey::BatchedNestedTensor)) {
    unsupported("a vmap batched tensor",
                "; call polyops outside torch.vmap or use torch.ops.polyops");
  }
  if (keys.has(c10::DispatchKey::FuncTorchGradWrapper)) {
    unsupported("a torch.func transform wrapper", "");
  }
  if (keys.has(c10::DispatchKey::NestedTensor) ||
      tensor.layout() == c10::kJagged) {
    unsupported("a nested tensor", "; pass its dense components");
  }
  if (tensor.layout() != c10::kStrided) {
    throw InvalidArgument(detail::Concat(
        "polyops.", op, ": ", name,
        " must be a dense (strided) tensor, got layout ", tensor.layout()));
  }
  if (!tensor.unsafeGetTensorImpl()->has_storage()) {
    unsupported("a tensor without storage", "");
  }
  throw NotImplemented(detail::Concat(
      "polyops.", op, " is not supported for ", name, " of shape ",
      tensor.sizes(), " with strides ", tensor.strides(), " and offset ",
      tensor.storage_offset(),
      " because its storage holds no data for it (null data pointer or "
      "storage of ",
      tensor.unsafeGetTensorImpl()->storage().nbytes(), " bytes)"));
}

void* CurrentStream(Device device, const char* op) {
  const c10::Device torch_device = ToTorchDevice(device);
  try {
    const c10::impl::DeviceGuardImplInterface* guard =
        c10::impl::getDeviceGuardImpl(torch_device.type());
    return guard->getStreamNativeHandle(guard->getStream(torch_device));
  } catch (const c10::Error& error) {
    throw BackendError(detail::Concat(
        "polyops.", op, ": cannot get torch's current stream of ",
        torch_device.str(), " (", error.what_without_backtrace(),
        "); pass stream= explicitly"));
  }
}

void SetPythonError() {
  try {
    throw;
  } catch (py::error_already_set& error) {
    error.restore();
  } catch (const ArgumentError& error) {
    PyErr_SetString(PyExc_TypeError, error.what());
  } catch (const InvalidArgument& error) {
    PyErr_SetString(PyExc_ValueError, error.what());
  } catch (const NotImplemented& error) {
    PyErr_SetString(PyExc_NotImplementedError, error.what());
  } catch (const c10::Error& error) {
    PyErr_SetString(PyExc_RuntimeError, error.what_without_backtrace());
  } catch (const std::exception& error) {
    PyErr_SetString(PyExc_RuntimeError, error.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "polyops: unknown C++ exception");
  }
}

}  // namespace polyops::python
