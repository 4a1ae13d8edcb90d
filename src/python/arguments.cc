// Argument parsing for the generated METH_FASTCALL op functions.
#include "python/arguments.h"

#include <string>

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

int64_t ArgImplementation(PyObject* value, std::optional<int64_t> index,
                          const OpState& state, Device device) {
  if (index) {
    throw ArgumentError(detail::Concat(
        "polyops.", state.name(),
        ": pass implementation_index or implementation, not both"));
  }
  if (!PyUnicode_Check(value)) {
    ThrowWrongType(value, state.name(), "implementation",
                   "a str (a slot name, see polyops.implementations)");
  }
  Py_ssize_t size = 0;
  const char* name = PyUnicode_AsUTF8AndSize(value, &size);
  if (!name) throw py::error_already_set();
  return state.SlotNamed(device.type, std::string_view(name, size));
}

void RegisterErrorTranslator() {
  py::register_local_exception_translator([](std::exception_ptr pointer) {
    try {
      if (pointer) std::rethrow_exception(pointer);
    } catch (const InvalidArgument& error) {
      PyErr_SetString(PyExc_ValueError, error.what());
    } catch (const NotImplemented& error) {
      PyErr_SetString(PyExc_NotImplementedError, error.what());
    } catch (const BackendError& error) {
      PyErr_SetString(PyExc_RuntimeError, error.what());
    }
  });
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
  } catch (const std::exception& error) {
    PyErr_SetString(PyExc_RuntimeError, error.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "polyops: unknown C++ exception");
  }
}

}  // namespace polyops::python
