// The torch.library form of the ops (torch.ops.polyops.*): see
// scripts/generate_wrappers.py (emit_torch_library) and docs/torch.md.
#ifndef POLYOPS_PYTHON_TORCH_LIBRARY_H_
#define POLYOPS_PYTHON_TORCH_LIBRARY_H_

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/util/Exception.h>

#include <string>
#include <vector>

#include "core/error.h"

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
// it refuses such views (as polyops.<op> does) instead of resolving them.
inline void RejectMathBits(const c10::OperatorHandle& op,
                           c10::DispatchKeySet /*keys*/,
                           torch::jit::Stack* stack) {
  const auto& arguments = op.schema().arguments();
  const auto values = torch::jit::last(*stack, arguments.size());
  std::string name = "an argument";
  for (size_t i = 0; i < arguments.size(); ++i) {
    const auto has_bit = [](const at::Tensor& tensor) {
      return tensor.defined() && (tensor.is_neg() || tensor.is_conj());
    };
    bool found = values[i].isTensor() && has_bit(values[i].toTensor());
    if (values[i].isTensorList()) {
      for (const at::Tensor& tensor : values[i].toTensorList().vec()) {
        found |= has_bit(tensor);
      }
    }
    if (found) {
      name = arguments[i].name();
      break;
    }
  }
  const std::string op_name = op.schema().name();
  C10_THROW_ERROR(
      NotImplementedError,
      detail::Concat(
          "polyops.", op_name.substr(op_name.find("::") + 2),
          " is not supported for ", name,
          " because it is a view with torch's negative or conjugate bit set "
          "(e.g. z.conj().imag), whose memory holds the values before "
          "negation; pass .resolve_neg() / .resolve_conj() of it"));
}

}  // namespace polyops::python

#endif  // POLYOPS_PYTHON_TORCH_LIBRARY_H_
