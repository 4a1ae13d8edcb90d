// cuda::Workspace memory from torch's CUDA caching allocator. It is looked up
// per allocation through libc10's registry (c10::GetAllocator), where CUDA
// torch's libc10_cuda registers it, so polyops links no torch CUDA library and
// the same _torch_ops imports under a CPU torch (where a workspace request
// fails with BackendError).
#include "python/cuda_allocator.h"

#include <c10/core/Allocator.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <memory>

#include "core/error.h"
#include "cuda/runtime/workspace.h"
#include "generated/ops_table.h"

namespace polyops::python {
namespace {

void DeleteDataPtr(void* context) {
  delete static_cast<c10::DataPtr*>(context);
}

void* AllocateWorkspace(size_t bytes, const Handle& handle, const char* op,
                        void** context, void (**release)(void*)) {
  const c10::Device device(c10::DeviceType::CUDA,
                           static_cast<c10::DeviceIndex>(handle.device.index));
  c10::Allocator* allocator = nullptr;
  try {
    allocator = c10::GetAllocator(c10::DeviceType::CUDA);
  } catch (const c10::Error&) {
    // Reported below with polyops' message.
  }
  if (allocator == nullptr) {
    throw BackendError(detail::Concat(
        "polyops.", op,
        ": CUDA scratch memory comes from torch's CUDA caching allocator, "
        "which is not registered (torch without CUDA?)"));
  }
  try {
    // The run's DeviceScope made handle.device current; the caching
    // allocator ties the block to that device's current stream.
    c10::DataPtr data = allocator->allocate(bytes);
    const c10::impl::DeviceGuardImplInterface* guard =
        c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
    if (guard->getStreamNativeHandle(guard->getStream(device)) !=
        handle.stream) {
      // The kernel runs on another stream (stream=): the block must not be
      // reused before that stream's work is done. An external stream's
      // StreamId is its cudaStream_t (null: the default stream, id 0).
      const auto id =
          static_cast<c10::StreamId>(reinterpret_cast<intptr_t>(handle.stream));
      guard->recordDataPtrOnStream(
          data, c10::Stream(c10::Stream::UNSAFE, device, id));
    }
    void* pointer = data.get();
    if (data.get_context() != nullptr) {
      // The usual case (the caching allocator's context is the pointer):
      // no host allocation per call.
      *release = data.get_deleter();
      *context = data.release_context();
    } else {
      *release = &DeleteDataPtr;
      *context = new c10::DataPtr(std::move(data));
    }
    return pointer;
  } catch (const c10::Error& error) {
    throw BackendError(
        detail::Concat("polyops.", op, ": CUDA scratch allocation of ", bytes,
                       " bytes failed: ", error.what_without_backtrace()));
  }
}

}  // namespace

void InstallCudaAllocator() {
  static const cuda::WorkspaceAllocator allocator{&AllocateWorkspace};
  Ops().set_cuda_workspace_allocator(&allocator);
}

}  // namespace polyops::python
