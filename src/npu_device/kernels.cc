// The aten kernels of the npu test device: factories, copies, views, set_,
// resize_, and the boxed CPU fallback for every other op.
//
// Device memory is only touched through aclrtMemcpy (runtime.h Memcpy), never
// by host loads and stores, so the kernels stay correct for a runtime whose
// device memory is not host-addressable and see the double's queued stream
// work (a synchronous aclrtMemcpy runs it first).
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_cpu_dispatch.h>
#include <ATen/ops/set_cpu_dispatch.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <optional>

#include "npu_device/runtime.h"

namespace polyops::npu {
namespace {

constexpr auto kNpuKeys = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1);

// --- factories ---------------------------------------------------------------

void CheckFactoryOptions(std::optional<c10::Layout> layout,
                         std::optional<bool> pin_memory) {
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided,
              "npu: only strided tensors are supported");
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory),
              "npu: pin_memory applies to CPU tensors only");
}

at::Tensor EmptyMemoryFormat(c10::IntArrayRef size,
                             std::optional<c10::ScalarType> dtype,
                             std::optional<c10::Layout> layout,
                             std::optional<c10::Device> device,
                             std::optional<bool> pin_memory,
                             std::optional<c10::MemoryFormat> memory_format) {
  CheckFactoryOptions(layout, pin_memory);
  // Out-of-tree kernels get no generated device guard: without this the
  // allocator would place npu:1 tensors on the current device.
  c10::OptionalDeviceGuard guard(device);
  return at::detail::empty_generic(size, DeviceAllocator(), kNpuKeys,
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor EmptyStrided(c10::IntArrayRef size, c10::IntArrayRef stride,
                        std::optional<c10::ScalarType> dtype,
                        std::optional<c10::Layout> layout,
                        std::optional<c10::Device> device,
                        std::optional<bool> pin_memory) {
  CheckFactoryOptions(layout, pin_memory);
  c10::OptionalDeviceGuard guard(device);
  return at::detail::empty_strided_generic(
      size, stride, DeviceAllocator(), kNpuKeys, c10::dtype_or_default(dtype));
}

// --- copies ------------------------------------------------------------------

// Elements from a view's first element to one past its last (torch strides
// are never negative, so the first element is the lowest address).
int64_t SpanElements(const at::Tensor& tensor) {
  if (tensor.numel() == 0) return 0;
  int64_t span = 1;
  for (int64_t dim = 0; dim < tensor.dim(); ++dim) {
    span += (tensor.size(dim) - 1) * tensor.stride(dim);
  }
  return span;
}

size_t SpanBytes(const at::Tensor& tensor) {
  return static_cast<size_t>(SpanElements(tensor)) * tensor.itemsize();
}

// The address of a view's first element (valid for numel == 0 too, unlike
// data_ptr()).
char* FirstElement(const at::Tensor& tensor) {
  return static_cast<char*>(tensor.storage().mutable_data()) +
         tensor.storage_offset() * tensor.itemsize();
}

// aclrtMemcpy's destMax for a write at the view's first element: the bytes
// left in its storage from there.
size_t Capacity(const at::Tensor& tensor) {
  return tensor.storage().nbytes() -
         tensor.storage_offset() * tensor.itemsize();
}

// A CPU tensor with the sizes, strides and conj/neg bits of the npu view
// `tensor`, over a host buffer of the bytes the view spans; `fill` copies
// them from the device first.
at::Tensor HostMirror(const at::Tensor& tensor, bool fill) {
  at::Tensor buffer =
      at::empty({SpanElements(tensor)}, tensor.options().device(at::kCPU));
  if (fill) {
    Memcpy(buffer.data_ptr(), SpanBytes(tensor), FirstElement(tensor),
           SpanBytes(tensor), MemcpyKind::kDeviceToHost);
  }
  at::Tensor mirror = buffer.as_strided(tensor.sizes(), tensor.strides(), 0);
  mirror._set_conj(tensor.is_conj());
  mirror._set_neg(tensor.is_neg());
  return mirror;
}

// One memcpy moves the bytes when both sides have the same dtype, shape,
// strides and bits and cover their span exactly.
bool SameDenseLayout(const at::Tensor& src, const at::Tensor& dst) {
  return src.dtype() == dst.dtype() && src.sizes() == dst.sizes() &&
         src.strides() == dst.strides() && src.is_conj() == dst.is_conj() &&
         src.is_neg() == dst.is_neg() && dst.is_non_overlapping_and_dense();
}

// Kernel of aten::_copy_from(self, dst): copies `src` (= self) into `dst`
// with copy_'s semantics (dtype conversion, broadcasting), where at least one
// side is an npu tensor. Synchronous: non_blocking is accepted and ignored.
at::Tensor CopyBetweenDevices(const at::Tensor& src, const at::Tensor& dst,
                              bool /*non_blocking*/) {
  const bool src_on_npu = src.is_privateuseone();
  const bool dst_on_npu = dst.is_privateuseone();
  TORCH_CHECK((src_on_npu || src.is_cpu()) && (dst_on_npu || dst.is_cpu()),
              "npu: copies go between npu and cpu tensors only, got ",
              src.device(), " -> ", dst.device());
  if (dst.numel() == 0) return dst;
  // The runtime copies on the thread's device: make it the npu side's.
  c10::DeviceGuard guard(dst_on_npu ? dst.device() : src.device());
  if (!dst_on_npu) {
    dst.copy_(HostMirror(src, /*fill=*/true));
    return dst;
  }
  if (SameDenseLayout(src, dst)) {
    // D2D across devices works on the double (one host address space); real
    // CANN would need aclrtDeviceEnablePeerAccess first.
    Memcpy(
        FirstElement(dst), Capacity(dst),
        src_on_npu ? FirstElement(src) : src.const_data_ptr(), SpanBytes(dst),
        src_on_npu ? MemcpyKind::kDeviceToDevice : MemcpyKind::kHostToDevice);
    return dst;
  }
  // Stage on the host: the CPU copy_ does the conversion and the striding.
  // A destination with gaps between its elements is read first, so the
  // write-back of its whole span leaves the gaps unchanged.
  const at::Tensor source = src_on_npu ? HostMirror(src, /*fill=*/true) : src;
  at::Tensor staged =
      HostMirror(dst, /*fill=*/!dst.is_non_overlapping_and_dense());
  staged.copy_(source);
  Memcpy(FirstElement(dst), Capacity(dst), staged.const_data_ptr(),
         SpanBytes(dst), MemcpyKind::kHostToDevice);
  return dst;
}

at::Tensor CopyAndResize(const at::Tensor& src, const at::Tensor& dst) {
  dst.resize_(src.sizes());
  return CopyBetweenDevices(src, dst, /*non_blocking=*/false);
}

// --- resize_ and set_ --------------------------------------------------------

// Kernel of aten::resize_. The CPU kernel would grow the storage with a host
// memcpy; this one goes through aclrtMalloc and aclrtMemcpy.
const at::Tensor& Resize(const at::Tensor& self, c10::IntArrayRef size,
                         std::optional<c10::MemoryFormat> memory_format) {
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  if (self.sizes() != size) impl->set_sizes_contiguous(size);
  if (memory_format.has_value()) {
    TORCH_CHECK(*memory_format != c10::MemoryFormat::Preserve,
                "npu: unsupported memory format Preserve for resize_");
    impl->empty_tensor_restride(*memory_format);
  }
  if (self.numel() > 0) {
    const size_t needed = at::detail::computeStorageNbytes(
        self.sizes(), self.strides(), self.itemsize(), self.storage_offset());
    if (needed > self.storage().nbytes()) {
      ResizeStorageBytes(self.storage().unsafeGetStorageImpl(), needed);
    }
  }
  return self;
}

at::Tensor& SetStorageOffset(at::Tensor& self, c10::Storage source,
                             int64_t storage_offset, c10::IntArrayRef size,
                             c10::IntArrayRef stride) {
  TORCH_CHECK(source.device_type() == c10::DeviceType::PrivateUse1,
              "npu: set_ needs an npu storage, got one on ", source.device());
  // torch's set_ grows a storage that is too small with a host memcpy; grow
  // it here through the runtime first so that it never has to.
  const bool empty = std::find(size.begin(), size.end(), 0) != size.end();
  if (!empty) {
    const size_t needed =
        stride.empty() ? at::detail::computeStorageNbytesContiguous(
                             size, self.itemsize(), storage_offset)
                       : at::detail::computeStorageNbytes(
                             size, stride, self.itemsize(), storage_offset);
    if (needed > source.nbytes()) {
      ResizeStorageBytes(source.unsafeGetStorageImpl(), needed);
    }
  }
  return at::cpu::set_(self, std::move(source), storage_offset, size, stride);
}

at::Tensor& SetStorage(at::Tensor& self, c10::Storage source) {
  const int64_t numel = static_cast<int64_t>(source.nbytes() / self.itemsize());
  return SetStorageOffset(self, std::move(source), 0, {numel}, {});
}

at::Tensor& SetTensor(at::Tensor& self, const at::Tensor& source) {
  if (self.is_same(source)) return self;
  return SetStorageOffset(self, source.storage(), source.storage_offset(),
                          source.sizes(), source.strides());
}

at::Tensor& SetEmpty(at::Tensor& self) {
  c10::DeviceGuard guard(self.device());
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, DeviceAllocator(),
                       /*resizable=*/true);
  return SetStorageOffset(self, std::move(storage), 0, {0}, {});
}

// --- views -------------------------------------------------------------------

// The CPU view kernels only rewrite metadata, so they serve any device.
at::Tensor AsStrided(const at::Tensor& self, c10::SymIntArrayRef size,
                     c10::SymIntArrayRef stride,
                     std::optional<c10::SymInt> storage_offset) {
  return at::cpu::as_strided_symint(self, size, stride,
                                    std::move(storage_offset));
}

// --- fallback ----------------------------------------------------------------

// Every op without an npu kernel runs on the CPU: arguments are copied to the
// host, the CPU kernel runs, results and mutated arguments are copied back.
// Device work queued on streams must have run before the host copies read it.
// View ops must not fall back (the result would be a copy, not a view), so
// error_on_views turns that into an error.
void CpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  SynchronizeAll();
  at::native::cpu_fallback(op, stack, /*error_on_views=*/true);
}

}  // namespace
}  // namespace polyops::npu

namespace {
namespace npu = polyops::npu;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(npu::EmptyMemoryFormat));
  m.impl("empty_strided", TORCH_FN(npu::EmptyStrided));
  m.impl("_copy_from", TORCH_FN(npu::CopyBetweenDevices));
  m.impl("_copy_from_and_resize", TORCH_FN(npu::CopyAndResize));
  m.impl("resize_", TORCH_FN(npu::Resize));
  m.impl("set_.source_Storage", TORCH_FN(npu::SetStorage));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(npu::SetStorageOffset));
  m.impl("set_.source_Tensor", TORCH_FN(npu::SetTensor));
  m.impl("set_", TORCH_FN(npu::SetEmpty));
  m.impl("as_strided", TORCH_FN(npu::AsStrided));
  m.impl("view", TORCH_FN(at::native::view));
  m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  m.impl("unfold", TORCH_FN(at::native::unfold));
  m.impl("view_as_real", TORCH_FN(at::native::view_as_real));
  m.impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
}

// torch resolves negated and conjugated inputs of most ops by cloning them,
// and a clone copies through _copy_from, which would recurse forever. copy_
// is exempt in torch; CopyBetweenDevices honours the bits itself, so
// _copy_from is exempt too.
TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&npu::CpuFallback>());
}
