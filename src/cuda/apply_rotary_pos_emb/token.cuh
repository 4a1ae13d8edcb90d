#ifndef POLYOPS_CUDA_APPLY_ROTARY_POS_EMB_TOKEN_CUH_
#define POLYOPS_CUDA_APPLY_ROTARY_POS_EMB_TOKEN_CUH_

#include "base/apply_rotary_pos_emb.h"
#include "core/operator.h"
#include "cuda/kernels/rotary/rotary.cuh"
#include "cuda/runtime/common.cuh"

namespace polyops {

// Slot 0: rotary_embedding's kernel (cuda/kernels/rotary/rotary.cuh) with token
// t's cos and sin taken from row t of cos and sin. Compiled, never executed on
// a GPU yet.
template <>
class Operator<ApplyRotaryPosEmb, Device::Type::kCuda, 0>
    : public ApplyRotaryPosEmb {
 public:
  static constexpr const char* kImplementationName = "token";

  explicit Operator(const Args& args) : ApplyRotaryPosEmb(args) {
    cuda::CheckRotaryFits(geometry_, kName);
  }

  void operator()(const Handle& handle, const Args& args) const override {
    cuda::RotateQueryKey(
        handle, geometry_, dtype_, table_dtype_, args.query, args.key,
        args.query_out, args.key_out, kName, [&](auto& table) {
          table.cos = static_cast<decltype(table.cos)>(args.cos.data());
          table.sin = static_cast<decltype(table.sin)>(args.sin.data());
          table.cos_stride = cos_stride_;
          table.sin_stride = sin_stride_;
          table.rows = geometry_.tokens;  // row t of each: always valid
        });
  }
};

}  // namespace polyops

#endif  // POLYOPS_CUDA_APPLY_ROTARY_POS_EMB_TOKEN_CUH_
