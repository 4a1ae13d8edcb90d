// Argument checks shared by the base classes. Each throws InvalidArgument
// with a message that names the op, the argument and what was expected.
#ifndef POLYOPS_CORE_CHECKS_H_
#define POLYOPS_CORE_CHECKS_H_

#include <initializer_list>
#include <optional>

#include "core/error.h"
#include "core/tensor.h"

namespace polyops {

inline void CheckSameDtype(const char* op, const char* name,
                           const Tensor& tensor, const char* ref_name,
                           const Tensor& ref) {
  POLYOPS_CHECK(tensor.dtype() == ref.dtype(), "polyops.", op, ": ", name,
                " must have the dtype of ", ref_name, " (",
                DataTypeName(ref.dtype()), "), got ",
                DataTypeName(tensor.dtype()));
}

inline void CheckSameShape(const char* op, const char* name,
                           const Tensor& tensor, const char* ref_name,
                           const Tensor& ref) {
  POLYOPS_CHECK(tensor.SameShape(ref), "polyops.", op, ": ", name,
                " must have the shape of ", ref_name, " ", ref.ShapeString(),
                ", got ", tensor.ShapeString());
}

// The three floating dtypes every op supports.
inline void CheckFloatDtype(const char* op, const char* name,
                            const Tensor& tensor) {
  POLYOPS_CHECK_T(IsReducedOrSingle(tensor.dtype()), NotImplemented, "polyops.",
                  op, " is not supported for ", name, " of dtype ",
                  DataTypeName(tensor.dtype()),
                  " because it is implemented for float16, bfloat16 and "
                  "float32 only");
}

inline void CheckMinDims(const char* op, const char* name, const Tensor& tensor,
                         int min_dims) {
  POLYOPS_CHECK(tensor.ndim() >= min_dims, "polyops.", op, ": ", name,
                " must have at least ", min_dims, " dim(s), got shape ",
                tensor.ShapeString());
}

inline void CheckLastDimContiguous(const char* op, const char* name,
                                   const Tensor& tensor) {
  POLYOPS_CHECK(
      tensor.ndim() == 0 || tensor.size(-1) <= 1 || tensor.stride(-1) == 1,
      "polyops.", op, ": ", name,
      " must be contiguous in its last dim (stride 1), got strides ",
      tensor.StridesString());
}

inline void CheckContiguous(const char* op, const char* name,
                            const Tensor& tensor) {
  POLYOPS_CHECK(tensor.IsContiguous(), "polyops.", op, ": ", name,
                " must be contiguous, got shape ", tensor.ShapeString(),
                " with strides ", tensor.StridesString(),
                " (call .contiguous() first)");
}

// A host mirror of a device tensor (paged_attention's seq_lens_host,
// flash_attention's cu_seqlens_*_host), when given: a CPU tensor with the
// dtype and shape of `device`, last dim contiguous. Its values cannot be
// compared here (the device side is not readable on the host). The
// bindings leave *_host arguments out of their same-device check: this is
// where their device is checked.
inline void CheckHostMirror(const char* op, const char* name,
                            const std::optional<Tensor>& host,
                            const char* device_name, const Tensor& device) {
  if (!host.has_value()) return;
  POLYOPS_CHECK(host->device().type == Device::Type::kCpu, "polyops.", op, ": ",
                name, " must be a CPU tensor, got one on ",
                DeviceTypeName(host->device().type));
  CheckSameDtype(op, name, *host, device_name, device);
  CheckSameShape(op, name, *host, device_name, device);
  CheckLastDimContiguous(op, name, *host);
}

// An output that was resolved by the bindings before construction.
inline const Tensor& RequireOutput(const char* op, const char* name,
                                   const std::optional<Tensor>& output) {
  POLYOPS_CHECK(output.has_value(), "polyops.", op, ": ", name,
                " was not provided");
  return *output;
}

// Same-shape elementwise outputs: "like `ref`".
inline TensorMeta MetaLike(const Tensor& ref) {
  TensorMeta meta;
  meta.ndim = ref.ndim();
  for (int i = 0; i < ref.ndim(); ++i) meta.shape[i] = ref.shape()[i];
  meta.dtype = ref.dtype();
  return meta;
}

}  // namespace polyops

#endif  // POLYOPS_CORE_CHECKS_H_
