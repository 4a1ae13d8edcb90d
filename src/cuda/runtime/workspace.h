// The allocator behind cuda::Workspace. The kernels library has no torch, so
// the Python extension installs torch's CUDA caching allocator here when it
// loads (src/python/cuda_allocator.cc). Plain C++: no CUDA headers needed.
#ifndef POLYOPS_CUDA_RUNTIME_WORKSPACE_H_
#define POLYOPS_CUDA_RUNTIME_WORKSPACE_H_

#include <cstddef>
#include <cstdint>

#include "core/handle.h"

namespace polyops::cuda {

struct WorkspaceAllocator {
  // Device memory of `bytes` (> 0) on handle.device, safe for work queued on
  // handle.stream until `release(*context)`. Sets *context and *release.
  // Throws BackendError naming `op`.
  void* (*allocate)(size_t bytes, const Handle& handle, const char* op,
                    void** context, void (**release)(void*));
};

void SetWorkspaceAllocator(const WorkspaceAllocator& allocator);

// Takes a Workspace of `bytes` for `handle` and gives it back; returns its
// address (0 for zero bytes). For tests of the allocator hook
// (polyops._C._cuda_workspace_probe).
uintptr_t ProbeWorkspace(const Handle& handle, size_t bytes);

}  // namespace polyops::cuda

#endif  // POLYOPS_CUDA_RUNTIME_WORKSPACE_H_
