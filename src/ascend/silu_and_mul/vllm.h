#ifndef POLYOPS_ASCEND_SILU_AND_MUL_VLLM_H_
#define POLYOPS_ASCEND_SILU_AND_MUL_VLLM_H_

#include <cstdint>
#include <optional>

#include "ascend/runtime/aclnn_prepare.h"
#include "ascend/runtime/launch.h"
#include "base/silu_and_mul.h"
#include "core/operator.h"

namespace polyops {

// Slot 1: vLLM's rounding order (polyops.integrations.vllm registers it as
// _C::silu_and_mul): aclnnSilu(gate half, tmp) rounds silu(gate) to the
// dtype, then aclnnMul(tmp, up half, out) rounds the product, as vLLM's
// kernel and its F.silu(x[..., :d]) * x[..., d:] reference do. Slot 0's
// single aclnnSwiGlu launch rounds once. Both APIs take strided views, so
// the halves are views of input (no copy); tmp is contiguous scratch of
// out's shape and dtype. Two repeatable launches.
template <>
class Operator<SiluAndMul, Device::Type::kAscend, 1> : public SiluAndMul {
 public:
  static constexpr const char* kImplementationName = "vllm";

  explicit Operator(const Args& args)
      : SiluAndMul(args),
        tmp_(ascend::ContiguousLike(*args.out, &tmp_bytes_)) {}

  void operator()(const Handle& handle, const Args& args) const override {
    if (args.out->numel() == 0) return;
    static const auto silu = ascend::Phase2("aclnnSilu", "8.0.RC1");
    static const auto mul = ascend::Phase2("aclnnMul", "8.0.RC1");
    // The halves: out's shape with input's strides, the up half up_offset_
    // elements further on.
    const Tensor gate = Tensor::FromParts(
        args.input.data(), args.out->ndim(), args.out->shape(),
        args.input.strides(), args.input.dtype(), args.input.device());
    const Tensor up = gate.WithData(static_cast<char*>(gate.data()) +
                                    up_offset_ * args.input.element_size());
    using ascend::Operand;
    ascend::RunSteps(kName, handle, tmp_bytes_,
                     {{&silu_,
                       "aclnnSilu",
                       {Operand::In(gate), Operand::Scratch(tmp_, 0)},
                       &ascend::PrepareSilu,
                       nullptr,
                       silu},
                      {&mul_,
                       "aclnnMul",
                       {Operand::ScratchIn(tmp_, 0), Operand::In(up),
                        Operand::Out(*args.out)},
                       &ascend::PrepareMul,
                       nullptr,
                       mul}});
  }

 private:
  int64_t tmp_bytes_ = 0;
  Tensor tmp_;  // silu(gate) in the dtype, contiguous, in scratch at 0
  mutable ascend::ExecutorCache silu_, mul_;
};

}  // namespace polyops

#endif  // POLYOPS_ASCEND_SILU_AND_MUL_VLLM_H_
