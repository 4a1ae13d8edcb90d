// What the torch.library kernels (generated torch_library.cc) use to turn
// at::Tensor arguments into polyops views, allocate omitted outputs and
// follow torch's autograd rules. The only header besides the test npu device
// that includes torch's C++ API (docs/user/torch.md).
#ifndef POLYOPS_PYTHON_TORCH_TENSORS_H_
#define POLYOPS_PYTHON_TORCH_TENSORS_H_

#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "python/arguments.h"

namespace polyops::python {

inline std::optional<DataType> FromScalarType(at::ScalarType type) {
  switch (type) {
    case at::kBool:
      return DataType::kBool;
    case at::kChar:
      return DataType::kInt8;
    case at::kShort:
      return DataType::kInt16;
    case at::kInt:
      return DataType::kInt32;
    case at::kLong:
      return DataType::kInt64;
    case at::kByte:
      return DataType::kUInt8;
    case at::kHalf:
      return DataType::kFloat16;
    case at::kBFloat16:
      return DataType::kBFloat16;
    case at::kFloat:
      return DataType::kFloat32;
    case at::kDouble:
      return DataType::kFloat64;
    default:
      return std::nullopt;
  }
}

inline at::ScalarType ToScalarType(DataType dtype) {
  switch (dtype) {
    case DataType::kBool:
      return at::kBool;
    case DataType::kInt8:
      return at::kChar;
    case DataType::kInt16:
      return at::kShort;
    case DataType::kInt32:
      return at::kInt;
    case DataType::kInt64:
      return at::kLong;
    case DataType::kUInt8:
      return at::kByte;
    case DataType::kFloat16:
      return at::kHalf;
    case DataType::kBFloat16:
      return at::kBFloat16;
    case DataType::kFloat32:
      return at::kFloat;
    case DataType::kFloat64:
      return at::kDouble;
  }
  return at::kFloat;
}

inline DataType ToDataType(at::ScalarType type, const char* op,
                           const char* name) {
  const std::optional<DataType> dtype = FromScalarType(type);
  POLYOPS_CHECK_T(dtype.has_value(), NotImplemented, "polyops.", op,
                  " is not supported for ", name, "=torch.",
                  torch::getTHPDtype(type)->name,
                  " because polyops handles bool, int8/16/32/64, uint8, "
                  "float16, bfloat16, float32 and float64 only");
  return *dtype;
}

inline Device ToDevice(const c10::Device& device, const char* op,
                       const char* name) {
  switch (device.type()) {
    case c10::DeviceType::CPU:
      return Device{Device::Type::kCpu, 0};
    case c10::DeviceType::CUDA:
      return Device{Device::Type::kCuda, device.index()};
    case c10::DeviceType::PrivateUse1:
      return Device{Device::Type::kAscend, device.index()};
    default:
      throw NotImplemented(detail::Concat(
          "polyops.", op, " is not supported for ", name, " on device '",
          device.str(), "' because polyops runs on cpu, cuda and npu tensors",
          device.type() == c10::DeviceType::Meta
              ? " (meta tensors have no data; torch.compile traces polyops "
                "through torch.ops.polyops, whose fake kernels handle them)"
              : ""));
  }
}

// Tensors whose memory a kernel must not read directly: wrappers that
// dispatch elsewhere (subclasses with __torch_dispatch__ such as
// FakeTensor, functionalization, vmap, torch.func transforms, nested
// tensors) and views whose math bits say the raw values are not the values
// (negated, conjugated).
inline c10::DispatchKeySet UnsupportedKeys() {
  return c10::DispatchKeySet({
      c10::DispatchKey::Python,
      c10::DispatchKey::PythonTLSSnapshot,
      c10::DispatchKey::Functionalize,
      c10::DispatchKey::FuncTorchBatched,
      c10::DispatchKey::BatchedNestedTensor,
      c10::DispatchKey::FuncTorchGradWrapper,
      c10::DispatchKey::NestedTensor,
      c10::DispatchKey::Negative,
      c10::DispatchKey::Conjugate,
  });
}

// Why `tensor` cannot be read as plain strided memory (the slow path of
// ToView, taken only when a check fails).
[[noreturn]] void ThrowUnsupportedTensor(const at::Tensor& tensor,
                                         const char* op, const char* name);

// The hot path: a handful of inline reads of the TensorImpl.
inline Tensor ToView(const at::Tensor& tensor, const char* op,
                     const char* name) {
  POLYOPS_CHECK(tensor.defined(), "polyops.", op, ": ", name,
                " is an undefined tensor");
  const c10::TensorImpl* impl = tensor.unsafeGetTensorImpl();
  if (impl->key_set().has_any(UnsupportedKeys()) ||
      tensor.layout() != c10::kStrided || !impl->has_storage()) {
    ThrowUnsupportedTensor(tensor, op, name);
  }
  const int64_t ndim = tensor.dim();
  POLYOPS_CHECK(ndim <= kMaxDims, "polyops.", op, ": ", name, " has ", ndim,
                " dims; polyops supports at most ", kMaxDims);
  const Device device = ToDevice(tensor.device(), op, name);
  const DataType dtype = ToDataType(tensor.scalar_type(), op, name);
  void* data = tensor.data_ptr();
  if (impl->numel() > 0) {
    const int64_t needed = StorageBytesNeeded(
        impl->storage_offset(), ndim, impl->sizes().data(),
        impl->strides().data(), static_cast<int64_t>(impl->itemsize()));
    if (!data || static_cast<int64_t>(impl->storage().nbytes()) < needed) {
      ThrowUnsupportedTensor(tensor, op, name);
    }
  }
  return Tensor::FromParts(data, static_cast<int>(ndim), tensor.sizes().data(),
                           tensor.strides().data(), dtype, device)
      .WithUnitStridesNormalized();
}

inline std::optional<Tensor> ToOptionalView(
    const std::optional<at::Tensor>& tensor, const char* op, const char* name) {
  if (!tensor) return std::nullopt;
  return ToView(*tensor, op, name);
}

inline std::vector<Tensor> ToViews(c10::ArrayRef<at::Tensor> tensors,
                                   const char* op, const char* name) {
  std::vector<Tensor> views;
  views.reserve(tensors.size());
  for (const at::Tensor& tensor : tensors)
    views.push_back(ToView(tensor, op, name));
  return views;
}

// Allocates the placeholder's tensor and points the view at it.
inline at::Tensor Allocate(std::optional<Tensor>& view,
                           const at::Tensor& like) {
  at::Tensor tensor =
      at::empty(c10::IntArrayRef(view->shape(), view->ndim()),
                like.options().dtype(ToScalarType(view->dtype())));
  view = view->WithData(tensor.data_ptr());
  return tensor;
}

// --- autograd ----------------------------------------------------------------
// polyops has no autograd formulas (docs/user/api.md "Autograd"). With grad
// mode on, a tensor that requires grad is refused rather than given a detached
// result; every tensor an op writes gets its version bumped, as torch's
// in-place ops do, so a backward through overwritten values raises.

// A tensor the op will write: refused where torch refuses an in-place write.
inline void CheckWritable(const at::Tensor& tensor, const char* op,
                          const char* name) {
  if (tensor.is_inference() && !c10::InferenceMode::is_enabled()) {
    throw std::runtime_error(detail::Concat(
        "polyops.", op, ": ", name,
        " is an inference tensor; in-place update to an inference tensor "
        "outside InferenceMode is not allowed (as in torch)"));
  }
  if (at::GradMode::is_enabled() && tensor.requires_grad() &&
      tensor.is_leaf()) {
    throw std::runtime_error(detail::Concat(
        "polyops.", op, ": ", name,
        " is a leaf tensor that requires grad and cannot be written in "
        "place (as in torch); write under torch.no_grad() or pass a "
        "tensor that does not require grad"));
  }
}
inline void CheckWritable(const std::optional<at::Tensor>& tensor,
                          const char* op, const char* name) {
  if (tensor) CheckWritable(*tensor, op, name);
}

inline void CheckNoGrad(const at::Tensor& tensor, const char* op,
                        const char* name) {
  POLYOPS_CHECK_T(!(tensor.requires_grad() && at::GradMode::is_enabled()),
                  NotImplemented, "polyops.", op,
                  " does not support autograd: ", name,
                  " requires grad and grad mode is on; call it under "
                  "torch.no_grad() or torch.inference_mode(), or pass ",
                  name, ".detach()");
}
inline void CheckNoGrad(const std::optional<at::Tensor>& tensor, const char* op,
                        const char* name) {
  if (tensor) CheckNoGrad(*tensor, op, name);
}
inline void CheckNoGrad(c10::ArrayRef<at::Tensor> tensors, const char* op,
                        const char* name) {
  for (const at::Tensor& tensor : tensors) CheckNoGrad(tensor, op, name);
}

inline void BumpVersion(const at::Tensor& tensor) {
  tensor.unsafeGetTensorImpl()->bump_version();
}
inline void BumpVersion(const std::optional<at::Tensor>& tensor) {
  if (tensor) BumpVersion(*tensor);
}

inline c10::Device ToTorchDevice(Device device) {
  const auto index = static_cast<c10::DeviceIndex>(device.index);
  switch (device.type) {
    case Device::Type::kCuda:
      return c10::Device(c10::DeviceType::CUDA, index);
    case Device::Type::kAscend:
      return c10::Device(c10::DeviceType::PrivateUse1, index);
    default:
      return c10::Device(c10::DeviceType::CPU);
  }
}

// Points polyops._C's negative-bit, autograd and version reads at the
// TensorImpl (instead of torch's Python-level functions).
void InstallTorchTensorFlags(TensorFlags& flags);

// Points polyops._C's device and stream lookups at torch's device guards
// (torch_npu's or the test device's for PrivateUse1).
void InstallTorchDeviceHooks(DeviceHooks& hooks);

}  // namespace polyops::python

#endif  // POLYOPS_PYTHON_TORCH_TENSORS_H_
