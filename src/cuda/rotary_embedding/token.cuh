#ifndef POLYOPS_CUDA_ROTARY_EMBEDDING_TOKEN_CUH_
#define POLYOPS_CUDA_ROTARY_EMBEDDING_TOKEN_CUH_

#include "base/rotary_embedding.h"
#include "core/operator.h"
#include "cuda/kernels/rotary/rotary.cuh"
#include "cuda/runtime/common.cuh"

namespace polyops {

// Slot 0: one block per token rotating all its query and key heads
// (cuda/kernels/rotary/rotary.cuh), cos/sin gathered from cos_sin_cache by
// positions on the device. Positions cannot be checked on the host without a
// copy: a token whose position is outside [0, max_pos) gets NaN in its rotary
// dims (the CPU slot raises ValueError instead); nothing is read or written out
// of bounds. Compiled, never executed on a GPU yet.
template <>
class Operator<RotaryEmbedding, Device::Type::kCuda, 0>
    : public RotaryEmbedding {
 public:
  static constexpr const char* kImplementationName = "token";

  Operator(const Tensor& positions, const Tensor& query,
           const std::optional<Tensor>& key, int64_t head_size,
           const Tensor& cos_sin_cache, bool is_neox_style = true,
           std::optional<int64_t> rotary_dim = std::nullopt,
           const std::optional<Tensor>& query_out = std::nullopt,
           const std::optional<Tensor>& key_out = std::nullopt)
      : RotaryEmbedding(positions, query, key, head_size, cos_sin_cache,
                        is_neox_style, rotary_dim, query_out, key_out) {
    cuda::CheckRotaryFits(geometry_, kName);
  }

  void operator()(const Handle& handle, const Tensor& positions,
                  const Tensor& query, const std::optional<Tensor>& key,
                  int64_t, const Tensor& cos_sin_cache, bool,
                  std::optional<int64_t>,
                  const std::optional<Tensor>& query_out,
                  const std::optional<Tensor>& key_out) const override {
    cuda::RotateQueryKey(
        handle, geometry_, dtype_, table_dtype_, query, key, query_out, key_out,
        kName, [&](auto& table) {
          table.cos = static_cast<decltype(table.cos)>(cos_sin_cache.data());
          table.sin = table.cos + geometry_.rotary_dim / 2;
          table.cos_stride = cache_stride_;
          table.sin_stride = cache_stride_;
          table.positions = positions.data();
          table.positions_int32 = position_dtype_ == DataType::kInt32;
          table.position_stride = position_stride_;
          table.rows = max_position_;
        });
  }
};

}  // namespace polyops

#endif  // POLYOPS_CUDA_ROTARY_EMBEDDING_TOKEN_CUH_
