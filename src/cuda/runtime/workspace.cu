// cuda::Workspace over the allocator the Python extension installs, and
// cuda::ThrowCudaError. Host code only, but compiled by nvcc: common.cuh
// holds device functions.
#include <atomic>

#include "cuda/runtime/common.cuh"
#include "cuda/runtime/workspace.h"

namespace polyops::cuda {
namespace {

// Set once at module load, read on every call: atomic, no lock.
std::atomic<decltype(WorkspaceAllocator::allocate)> g_allocate{nullptr};

}  // namespace

void SetWorkspaceAllocator(const WorkspaceAllocator& allocator) {
  g_allocate.store(allocator.allocate, std::memory_order_release);
}

void ThrowCudaError(cudaError_t status, const char* op, const char* what) {
  throw BackendError(detail::Concat("polyops.", op, ": CUDA error during ",
                                    what, ": ", cudaGetErrorName(status), ": ",
                                    cudaGetErrorString(status)));
}

Workspace::Workspace(const Handle& handle, size_t bytes, const char* op) {
  if (bytes == 0) return;  // nothing to allocate, nothing to free
  const auto allocate = g_allocate.load(std::memory_order_acquire);
  if (allocate == nullptr) {
    throw BackendError(detail::Concat(
        "polyops.", op,
        ": no CUDA scratch allocator is installed (it comes from torch's CUDA "
        "caching allocator when polyops._C loads under a CUDA torch)"));
  }
  data_ = allocate(bytes, handle, op, &context_, &release_);
  size_ = bytes;
}

Workspace::~Workspace() {
  if (release_ != nullptr) release_(context_);
}

uintptr_t ProbeWorkspace(const Handle& handle, size_t bytes) {
  const Workspace workspace(handle, bytes, "workspace_probe");
  return reinterpret_cast<uintptr_t>(workspace.data());
}

}  // namespace polyops::cuda
