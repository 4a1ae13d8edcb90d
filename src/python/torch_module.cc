// The polyops._torch_ops extension: what needs torch's C++ API. It registers
// torch.ops.polyops (torch_library.h) and points polyops._C's accelerator
// device, stream and CUDA scratch-memory lookups and its negative-bit /
// autograd reads at torch's. The ops themselves run in polyops._C, through
// its table of entry points (generated/ops_table.h). Built for the torch
// polyops is compiled with; docs/user/torch.md.
#include <string>

#include "generated/ops_table.h"
#include "python/torch_library.h"
#ifdef POLYOPS_WITH_CUDA
#include "python/cuda_allocator.h"
#endif

#ifndef POLYOPS_TORCH_VERSION
#define POLYOPS_TORCH_VERSION "unknown"
#endif

namespace polyops::python {
namespace {

const OpsTable* ops_table = nullptr;

}  // namespace

const OpsTable& Ops() { return *ops_table; }

PYBIND11_MODULE(_torch_ops, module) {
  RegisterErrorTranslator();

  ops_table = ImportOpsTable();
  InstallTorchDeviceHooks(*ops_table->device_hooks);
  InstallTorchTensorFlags(*ops_table->tensor_flags);
#ifdef POLYOPS_WITH_CUDA
  InstallCudaAllocator();
#endif

  // torch.ops.polyops: python/polyops/_torch_library.py calls this on import,
  // then registers a fake implementation per overload.
  module.def("_register_torch_library", &RegisterTorchLibrary);
  module.def("_refuse_autograd", &RegisterAutogradRefusal, py::arg("qualname"),
             py::arg("key"));
  // For tests: polyops._C's tensor reads back to this module's (after
  // polyops._C._use_portable_tensor_flags()).
  module.def("_use_torch_tensor_flags",
             [] { InstallTorchTensorFlags(*ops_table->tensor_flags); });
  module.attr("_torch_version") = POLYOPS_TORCH_VERSION;
}

}  // namespace polyops::python
