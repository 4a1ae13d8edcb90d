// The torch.library form of the ops (torch.ops.polyops.*): see
// scripts/generate_wrappers.py (emit_torch_library) and docs/torch.md.
#ifndef POLYOPS_PYTHON_TORCH_LIBRARY_H_
#define POLYOPS_PYTHON_TORCH_LIBRARY_H_

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/grad_mode.h>
#include <ATen/core/stack.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/util/Exception.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/library.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "python/torch_tensors.h"

namespace polyops::python {

struct TorchOverload {
  const char* op;
  const char* overload;  // "" is the default overload
  const char* schema;
  std::vector<std::string> returns;  // the outputs it allocates and returns
};

const std::vector<TorchOverload>& TorchOverloads();

// Defines every schema in the "polyops" namespace and registers the kernels
// for each built device. Throws (leaving nothing registered) on failure, e.g.
// when another library already owns the namespace. Idempotent.
void RegisterTorchLibrary();

// The fakes' validation (python/polyops/_torch_library.py): runs the base
// class constructor of `op` (src/base/<op>.h, the checks every slot runs)
// on metadata only. `values` maps the op's parameter names to None, a
// number, a torch.dtype, a tensor's (sizes, strides, dtype, device) or a
// list of those. Raises what the kernel would raise for the same shapes,
// dtypes and devices; returns the (shape, dtype) of each output the
// overload allocates (Default<Out>), in order.
py::list CheckMeta(const std::string& op, const std::string& overload,
                   const py::dict& values);

// torch turns c10 errors into Python exceptions by type; polyops' own errors
// would all become RuntimeError. Keep ValueError / NotImplementedError.
template <typename Fn>
auto TranslateErrors(Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const InvalidArgument& error) {
    C10_THROW_ERROR(ValueError, error.what());
  } catch (const NotImplemented& error) {
    C10_THROW_ERROR(NotImplementedError, error.what());
  } catch (const Error& error) {
    C10_THROW_ERROR(Error, error.what());
  }
}

// The kernel of every overload for torch's Negative and Conjugate keys.
// torch's own fallback there resolves mutated arguments into clones and
// expects the op to return them; polyops' mutating overloads return
// nothing, and that fallback's failed internal assert leaves a tensor
// whose destruction aborts the interpreter. polyops reads raw memory, so
// it refuses such views with polyops.<op>'s own error.
inline void RejectMathBits(const c10::OperatorHandle& op,
                           c10::DispatchKeySet /*keys*/,
                           torch::jit::Stack* stack) {
  const auto& arguments = op.schema().arguments();
  const auto values = torch::jit::last(*stack, arguments.size());
  const std::string qualified = op.schema().name();
  const std::string name = qualified.substr(qualified.find("::") + 2);
  const auto has_bit = [](const at::Tensor& tensor) {
    return tensor.defined() && (tensor.is_neg() || tensor.is_conj());
  };
  TranslateErrors([&] {
    for (size_t i = 0; i < arguments.size(); ++i) {
      std::vector<at::Tensor> tensors;
      if (values[i].isTensor()) tensors.push_back(values[i].toTensor());
      if (values[i].isTensorList()) tensors = values[i].toTensorList().vec();
      for (const at::Tensor& tensor : tensors) {
        if (has_bit(tensor)) {
          ThrowUnsupportedTensor(tensor, name.c_str(),
                                 arguments[i].name().c_str());
        }
      }
    }
    // Only a tensor with one of the bits routes a call here.
    throw NotImplemented(
        detail::Concat("polyops.", name,
                       " is not supported for a negated or conjugated view"));
  });
}

// The Autograd kernel of every overload. polyops has no derivative
// formulas; without this kernel torch's fallback would only warn, and a
// compiled graph (whose fake kernels never reach the check in the real
// kernel) would silently drop the op's gradient. With grad mode on it
// refuses what the real kernel refuses, in the same order and with the same
// messages: a written leaf that requires grad (RuntimeError, as torch), then
// any tensor that requires grad (NotImplementedError). Otherwise it hands
// the call on below autograd.
inline void RefuseAutograd(const c10::OperatorHandle& op,
                           c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  if (at::GradMode::is_enabled()) {
    const auto& arguments = op.schema().arguments();
    const auto values = torch::jit::last(*stack, arguments.size());
    const auto each_tensor = [&](auto&& visit) {
      for (size_t i = 0; i < arguments.size(); ++i) {
        if (values[i].isTensor()) visit(values[i].toTensor(), arguments[i]);
        if (values[i].isTensorList()) {
          for (const c10::IValue& item : values[i].toListRef()) {
            visit(item.toTensor(), arguments[i]);
          }
        }
      }
    };
    bool requires_grad = false;
    each_tensor([&](const at::Tensor& tensor, const c10::Argument&) {
      requires_grad = requires_grad || tensor.requires_grad();
    });
    if (requires_grad) {  // then the checks below raise
      // The messages say "polyops.<label>": "polyops::add" -> "add"; an op
      // polyops serves under another name keeps it: "_C::rms_norm" ->
      // "_C.rms_norm".
      std::string label = op.schema().name();
      const size_t separator = label.find("::");
      if (label.compare(0, separator, "polyops") == 0) {
        label.erase(0, separator + 2);
      } else {
        label.replace(separator, 2, ".");
      }
      TranslateErrors([&] {
        each_tensor([&](const at::Tensor& tensor, const c10::Argument& arg) {
          if (arg.alias_info() && arg.alias_info()->isWrite()) {
            CheckWritable(tensor, label.c_str(), arg.name().c_str());
          }
        });
        each_tensor([&](const at::Tensor& tensor, const c10::Argument& arg) {
          CheckNoGrad(tensor, label.c_str(), arg.name().c_str());
        });
      });
    }
  }
  op.redispatchBoxed(keys & c10::after_autograd_keyset, stack);
}

// Registers RefuseAutograd for `qualname` ("namespace::name") at dispatch
// key `key` (e.g. "AutogradCPU"): for the ops polyops serves under other
// names (polyops.integrations.vllm). It lasts for the process.
inline void RegisterAutogradRefusal(const std::string& qualname,
                                    const std::string& key) {
  // Never destroyed, as RegisterTorchLibrary's libraries.
  static auto* libraries = new std::vector<std::unique_ptr<torch::Library>>();
  const size_t separator = qualname.find("::");
  POLYOPS_CHECK(separator != std::string::npos,
                "polyops: expected an op name 'namespace::name', got '",
                qualname, "'");
  libraries->push_back(std::make_unique<torch::Library>(
      torch::Library::IMPL, qualname.substr(0, separator),
      c10::parseDispatchKey(key), __FILE__, __LINE__));
  libraries->back()->impl(
      qualname.substr(separator + 2).c_str(),
      torch::CppFunction::makeFromBoxedFunction<&RefuseAutograd>());
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

// The arguments of one CheckMeta call, read as views without data. Tensors
// must be on the device of the op's first tensor (the `_host` mirrors
// excepted, as in Get<Op>); meta tensors are validated as CPU tensors.
class MetaArguments {
 public:
  MetaArguments(py::dict values, const char* op, const char* primary)
      : values_(std::move(values)), op_(op) {
    PyObject* first = Get(primary);
    if (first && PyList_Check(first)) {
      first = PyList_Size(first) ? PyList_GetItem(first, 0) : nullptr;
    }
    if (first) like_ = ToMetaView(first, primary, &primary_);
  }

  // The value of `name`, or nullptr for None or absent.
  PyObject* Get(const char* name) const {
    PyObject* value = PyDict_GetItemString(values_.ptr(), name);
    return value == Py_None ? nullptr : value;
  }
  PyObject* Required(const char* name) const {
    PyObject* value = Get(name);
    POLYOPS_CHECK(value, "polyops.", op_, ": ", name, " is required");
    return value;
  }
  Tensor View(const char* name) const { return Checked(Required(name), name); }
  std::optional<Tensor> OptionalView(const char* name) const {
    if (!Get(name)) return std::nullopt;
    return View(name);
  }
  std::vector<Tensor> Views(const char* name) const {
    PyObject* list = Required(name);
    POLYOPS_CHECK(PyList_Check(list), "polyops.", op_, ": ", name,
                  " must be given as a list");
    std::vector<Tensor> views;
    for (py::handle item : py::reinterpret_borrow<py::list>(list)) {
      views.push_back(Checked(item, name));
    }
    return views;
  }
  ScalarOrTensor ScalarOrView(const char* name) const {
    PyObject* value = Required(name);
    if (PyTuple_Check(value)) return ScalarOrTensor{View(name), 0.0};
    return ScalarOrTensor{std::nullopt, ArgDouble(value, op_, name)};
  }
  // A view on the first tensor's device, for Placeholder.
  const Tensor& Like() const { return like_; }

 private:
  // (sizes, strides, dtype, device) -> a view without data. Checks what
  // ToView checks without reading memory: dims, dtype, device type.
  Tensor ToMetaView(py::handle value, const char* name,
                    c10::Device* device) const {
    POLYOPS_CHECK(PyTuple_Check(value.ptr()) && PyTuple_Size(value.ptr()) == 4,
                  "polyops.", op_, ": ", name,
                  " must be given as (sizes, strides, dtype, device)");
    const auto meta = py::reinterpret_borrow<py::tuple>(value);
    const auto sizes = meta[0].cast<std::vector<int64_t>>();
    const auto strides = meta[1].cast<std::vector<int64_t>>();
    const auto ndim = static_cast<int64_t>(sizes.size());
    POLYOPS_CHECK(ndim <= kMaxDims, "polyops.", op_, ": ", name, " has ", ndim,
                  " dims; polyops supports at most ", kMaxDims);
    const DataType dtype =
        ToDataType(ArgScalarType(meta[2].ptr(), op_, name), op_, name);
    *device = meta[3].cast<c10::Device>();
    return Tensor::FromParts(
        nullptr, static_cast<int>(ndim), sizes.data(), strides.data(), dtype,
        device->is_meta() ? Device{} : ToDevice(*device, op_, name));
  }

  // As Get<Op>'s CheckDevice, and a meta tensor never pairs with another.
  Tensor Checked(py::handle value, const char* name) const {
    c10::Device device = primary_;
    const Tensor view = ToMetaView(value, name, &device);
    const std::string_view text(name);
    if (text.size() > 5 && text.substr(text.size() - 5) == "_host") {
      return view;  // host mirrors live on the CPU: the base class checks
    }
    POLYOPS_CHECK(device.is_meta() == primary_.is_meta(), "polyops.", op_, ": ",
                  name, " is on ", device.str(),
                  " but the op runs on the device of its first tensor, ",
                  primary_.str());
    CheckDevice(view, like_.device(), op_, name);
    return view;
  }

  py::dict values_;
  const char* op_;
  c10::Device primary_{c10::kCPU};
  Tensor like_;
};

// (shape, dtype) of a placeholder, as CheckMeta returns it.
inline py::tuple MetaResult(const Tensor& view) {
  py::tuple shape(view.ndim());
  for (int d = 0; d < view.ndim(); ++d) shape[d] = view.size(d);
  PyObject* dtype = reinterpret_cast<PyObject*>(
      torch::getTHPDtype(ToScalarType(view.dtype())));
  return py::make_tuple(shape, py::reinterpret_borrow<py::object>(dtype));
}

}  // namespace polyops::python

#endif  // POLYOPS_PYTHON_TORCH_LIBRARY_H_
