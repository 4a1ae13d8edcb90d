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

  explicit Operator(const Args& args) : RotaryEmbedding(args) {
    cuda::CheckRotaryFits(geometry_, kName);
  }

  void operator()(const Handle& handle, const Args& args) const override {
    cuda::RotateQueryKey(
        handle, geometry_, dtype_, table_dtype_, args.query, args.key,
        args.query_out, args.key_out, kName, [&](auto& table) {
          table.cos =
              static_cast<decltype(table.cos)>(args.cos_sin_cache.data());
          table.sin = table.cos + geometry_.rotary_dim / 2;
          table.cos_stride = cache_stride_;
          table.sin_stride = cache_stride_;
          table.positions = args.positions.data();
          table.positions_int32 = position_dtype_ == DataType::kInt32;
          table.position_stride = position_stride_;
          table.rows = max_position_;
        });
  }
};

}  // namespace polyops

#endif  // POLYOPS_CUDA_ROTARY_EMBEDDING_TOKEN_CUH_
