// Installs torch's CUDA caching allocator as the allocator behind
// cuda::Workspace (src/cuda/runtime/workspace.h). Built only with the CUDA
// backend.
#ifndef POLYOPS_PYTHON_CUDA_ALLOCATOR_H_
#define POLYOPS_PYTHON_CUDA_ALLOCATOR_H_

namespace polyops::python {

void InstallCudaAllocator();

}  // namespace polyops::python

#endif  // POLYOPS_PYTHON_CUDA_ALLOCATOR_H_
