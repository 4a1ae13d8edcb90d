// The descriptors and host-side CANN objects behind launch.h: tensor
// descriptors over 32-byte-aligned bases, aclScalar / aclIntArray values,
// and polyops' dtypes as CANN's.
#include "ascend/runtime/descriptors.h"

#include <cstdint>
#include <initializer_list>

#include "ascend/runtime/cann.h"
#include "ascend/runtime/launch.h"
#include "core/error.h"
#include "core/tensor.h"

namespace polyops::ascend {
namespace {

constexpr uintptr_t kAlignment = 32;  // CANN: addresses 32-byte aligned

}  // namespace

Placement Place(const Tensor& view, const char* op) {
  const auto address = reinterpret_cast<uintptr_t>(view.data());
  const uintptr_t base = address & ~(kAlignment - 1);
  const auto gap = static_cast<int64_t>(address - base);
  POLYOPS_CHECK(gap % view.element_size() == 0, "polyops.", op,
                ": a tensor's address is not a multiple of its element size");
  return {reinterpret_cast<void*>(base), gap / view.element_size()};
}

AclTensor* CreateTensor(const Runtime& rt, const Tensor& view,
                        const Placement& place, const char* op) {
  int64_t extent = place.offset + 1;
  for (int d = 0; d < view.ndim(); ++d) {
    extent += (view.size(d) - 1) * view.stride(d);
  }
  const int64_t storage[1] = {view.numel() == 0 ? 0 : extent};
  AclTensor* tensor = rt.create_tensor(
      view.shape(), static_cast<uint64_t>(view.ndim()), ToAcl(view.dtype()),
      view.strides(), place.offset, kAclFormatNd, storage, 1, place.base);
  if (!tensor) {
    const char* message = rt.get_recent_err_msg();
    throw BackendError(detail::Concat(
        "polyops.", op, ": aclCreateTensor failed for shape ",
        view.ShapeString(), ": ", message ? message : "(no message)"));
  }
  return tensor;
}

void CheckCreated(const void* object, const char* op, const char* call) {
  if (object) return;
  const char* message = GetRuntime().get_recent_err_msg();
  throw BackendError(
      detail::Concat("polyops", op ? "." : "", op ? op : "", ": ", call,
                     " failed: ", message ? message : "(no message)"));
}

AclDataType ToAcl(DataType dtype) {
  switch (dtype) {
    case DataType::kBool:
      return AclDataType::kBool;
    case DataType::kInt8:
      return AclDataType::kInt8;
    case DataType::kInt16:
      return AclDataType::kInt16;
    case DataType::kInt32:
      return AclDataType::kInt32;
    case DataType::kInt64:
      return AclDataType::kInt64;
    case DataType::kUInt8:
      return AclDataType::kUInt8;
    case DataType::kFloat16:
      return AclDataType::kFloat16;
    case DataType::kBFloat16:
      return AclDataType::kBFloat16;
    case DataType::kFloat32:
      return AclDataType::kFloat;
    case DataType::kFloat64:
      return AclDataType::kDouble;
  }
  return AclDataType::kFloat;
}

IntArrayHandle::IntArrayHandle(std::initializer_list<int64_t> values) {
  const Runtime& rt = GetRuntime();
  array_ = rt.create_int_array(values.begin(), values.size());
  CheckCreated(array_, nullptr, "aclCreateIntArray");
}

AclScalar* ScalarOf(DataType dtype, double value) {
  const Runtime& rt = GetRuntime();
  auto as_float = static_cast<float>(value);
  auto as_int = static_cast<int64_t>(value);
  AclScalar* scalar = nullptr;
  if (dtype == DataType::kFloat64) {
    scalar = rt.create_scalar(&value, AclDataType::kDouble);
  } else if (IsFloatingPoint(dtype)) {
    scalar = rt.create_scalar(&as_float, AclDataType::kFloat);
  } else {
    scalar = rt.create_scalar(&as_int, AclDataType::kInt64);
  }
  CheckCreated(scalar, nullptr, "aclCreateScalar");
  return scalar;
}

AclScalar* ScalarFloat(float value) {
  const Runtime& rt = GetRuntime();
  AclScalar* scalar = rt.create_scalar(&value, AclDataType::kFloat);
  CheckCreated(scalar, nullptr, "aclCreateScalar");
  return scalar;
}

}  // namespace polyops::ascend
