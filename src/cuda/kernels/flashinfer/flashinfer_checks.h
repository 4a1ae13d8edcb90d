// Envelope checks the two FlashInfer slots share
// (docs/backends/cuda_attention.md, "flashinfer"): each raises NotImplemented
// in a slot's constructor, so the default selection falls back to slot 0
// ("flash").
#ifndef POLYOPS_CUDA_KERNELS_FLASHINFER_FLASHINFER_CHECKS_H_
#define POLYOPS_CUDA_KERNELS_FLASHINFER_FLASHINFER_CHECKS_H_

#ifdef POLYOPS_WITH_FLASHINFER

#include <cstdint>
#include <limits>

#include "core/data_type.h"
#include "core/error.h"
#include "core/tensor.h"
#include "cuda/kernels/flashinfer/flashinfer_plan.h"

namespace polyops::cuda::flashinfer {

// FlashInfer indexes with 32-bit integers: every element offset it forms
// must stay below 2^31.
inline constexpr int64_t kMaxOffset = std::numeric_limits<int32_t>::max();

// The refusal every check raises.
template <typename... Parts>
[[noreturn]] void Refuse(const char* op, const Parts&... parts) {
  throw NotImplemented(::polyops::detail::Concat(
      "polyops.", op, ": flashinfer slot on cuda does not support ", parts...,
      "; use implementation_index=0"));
}

// The dtype and head size have compiled launchers.
inline void CheckCompiled(const char* op, DataType dtype, int64_t head_dim) {
  if (dtype == DataType::kFloat32) {
    Refuse(op,
           "float32 because FlashInfer's FA2 kernels multiply 16-bit "
           "operands on tensor cores");
  }
  const bool found = DispatchCompiled(dtype, head_dim, [](auto, auto) {});
  if (!found) {
    Refuse(op, DataTypeName(dtype), " with head size ", head_dim,
           " because this build compiled FlashInfer kernels for ",
           CompiledSet(),
           " only (cmake POLYOPS_FLASHINFER_DTYPES / "
           "POLYOPS_FLASHINFER_HEAD_DIMS)");
  }
}

// Rows of `tensor` (dims before the last) are loaded 16 bytes at a time with
// cp.async, and FlashInfer's offsets are 32-bit.
inline void CheckOperand(const char* op, const char* name,
                         const Tensor& tensor) {
  for (int d = 0; d + 1 < tensor.ndim(); ++d) {
    if (tensor.size(d) > 1 && tensor.stride(d) % 8 != 0) {
      Refuse(op, name, " with stride ", tensor.stride(d), " in dim ", d,
             " because FlashInfer copies rows 16 bytes at a time (strides "
             "must be multiples of 8 elements)");
    }
    if (tensor.size(d) > 0 && tensor.stride(d) > 0 &&
        tensor.size(d) > kMaxOffset / tensor.stride(d)) {
      Refuse(op, name, " ", tensor.ShapeString(),
             " because FlashInfer's element offsets are 32-bit");
    }
  }
}

// FlashInfer writes the output as [T, Hq, D] rows without strides.
inline void CheckContiguousOut(const char* op, const Tensor& out) {
  if (!out.IsContiguous()) {
    Refuse(op,
           "a non-contiguous out because FlashInfer writes it with "
           "fixed row strides Hq * D and D");
  }
  if (out.numel() > kMaxOffset) {
    Refuse(op, "an out of ", out.numel(),
           " elements because FlashInfer's element offsets are 32-bit");
  }
}

// FlashInfer's page ids are 32-bit: an int64 block table may name blocks
// past INT32_MAX when the cache has that many.
inline void CheckPageIds(const char* op, const Tensor& table,
                         int64_t num_blocks) {
  if (table.dtype() == DataType::kInt64 && num_blocks > kMaxOffset) {
    Refuse(op, "an int64 block table over a cache of ", num_blocks,
           " blocks because FlashInfer's page ids are 32-bit");
  }
}

// Paged caches: FlashInfer's paged_kv_t has one set of 32-bit strides for
// both caches.
inline void CheckCaches(const char* op, const Tensor& key,
                        const Tensor& value) {
  for (int d = 0; d < key.ndim(); ++d) {
    if (key.stride(d) != value.stride(d)) {
      Refuse(op,
             "key and value caches with different strides because "
             "FlashInfer's paged_kv_t takes one set of strides for both");
    }
    if (key.stride(d) > std::numeric_limits<uint32_t>::max()) {
      Refuse(op, "cache stride ", key.stride(d),
             " because FlashInfer keeps cache strides in 32 bits");
    }
  }
  for (int d = 0; d < 3; ++d) {
    if (key.stride(d) % 8 != 0) {
      Refuse(op, "cache stride ", key.stride(d), " in dim ", d,
             " because FlashInfer copies rows 16 bytes at a time (strides "
             "must be multiples of 8 elements)");
    }
  }
}

// Per call: cp.async needs 16-byte aligned rows; the cache key does not see
// data pointers, so this cannot be decided in the constructor.
inline void CheckAligned(const char* op, const char* name, const void* data) {
  if (reinterpret_cast<uintptr_t>(data) % 16 != 0) {
    throw NotImplemented(::polyops::detail::Concat(
        "polyops.", op, ": flashinfer slot on cuda does not support ", name,
        " at an address that is not 16-byte aligned because FlashInfer "
        "copies rows 16 bytes at a time; use implementation_index=0"));
  }
}

inline uint16_t NanBits(DataType dtype) {
  return dtype == DataType::kFloat16 ? uint16_t{0x7E00} : uint16_t{0x7FC0};
}

}  // namespace polyops::cuda::flashinfer

#endif  // POLYOPS_WITH_FLASHINFER

#endif  // POLYOPS_CUDA_KERNELS_FLASHINFER_FLASHINFER_CHECKS_H_
