// The torch.library form of the ops (torch.ops.polyops.*): see
// scripts/generate_wrappers.py (emit_torch_library) and docs/user/torch.md.
#ifndef POLYOPS_PYTHON_TORCH_LIBRARY_H_
#define POLYOPS_PYTHON_TORCH_LIBRARY_H_

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/grad_mode.h>
#include <ATen/core/stack.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/util/Exception.h>
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

}  // namespace polyops::python

#endif  // POLYOPS_PYTHON_TORCH_LIBRARY_H_
