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
#include "python/binding_support.h"

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

}  // namespace polyops::python

#endif  // POLYOPS_PYTHON_TORCH_LIBRARY_H_
