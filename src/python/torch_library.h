// The torch.library form of the ops (torch.ops.polyops.*): see
// scripts/generate_wrappers.py (emit_torch_library) and docs/torch.md.
#ifndef POLYOPS_PYTHON_TORCH_LIBRARY_H_
#define POLYOPS_PYTHON_TORCH_LIBRARY_H_

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

}  // namespace polyops::python

#endif  // POLYOPS_PYTHON_TORCH_LIBRARY_H_
