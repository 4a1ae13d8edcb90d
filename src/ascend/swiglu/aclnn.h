#ifndef POLYOPS_ASCEND_SWIGLU_ACLNN_H_
#define POLYOPS_ASCEND_SWIGLU_ACLNN_H_

#include <optional>

#include "ascend/runtime/aclnn_prepare.h"
#include "ascend/runtime/launch.h"
#include "base/swiglu.h"
#include "core/operator.h"

namespace polyops {

// Slot 0: out = input * silu(gate) as aclnnSilu(gate, tmp) then
// aclnnMul(input, tmp, out), tmp a contiguous scratch tensor of input's
// dtype: two repeatable launches, any strides (both APIs take strided
// views). silu(gate) is rounded to the dtype before the product, so fp16 /
// bf16 results carry up to two roundings (within FLOAT32_COMPUTE; the
// float32 path of the other backends rounds once). out may be input or gate:
// gate is consumed by the first launch, and the product is elementwise.
template <>
class Operator<Swiglu, Device::Type::kAscend, 0> : public Swiglu {
 public:
  static constexpr const char* kImplementationName = "aclnn";

  explicit Operator(const Args& args)
      : Swiglu(args), tmp_(ascend::ContiguousLike(args.input, &tmp_bytes_)) {}

  void operator()(const Handle& handle, const Args& args) const override {
    if (args.out->numel() == 0) return;
    static const auto silu = ascend::Phase2("aclnnSilu", "8.0.RC1");
    static const auto mul = ascend::Phase2("aclnnMul", "8.0.RC1");
    using ascend::Operand;
    ascend::RunSteps(kName, handle, tmp_bytes_,
                     {{&silu_,
                       "aclnnSilu",
                       {Operand::In(args.gate), Operand::Scratch(tmp_, 0)},
                       &ascend::PrepareSilu,
                       nullptr,
                       silu},
                      {&mul_,
                       "aclnnMul",
                       {Operand::In(args.input), Operand::ScratchIn(tmp_, 0),
                        Operand::Out(*args.out)},
                       &ascend::PrepareMul,
                       nullptr,
                       mul}});
  }

 private:
  int64_t tmp_bytes_ = 0;
  Tensor tmp_;  // silu(gate), contiguous, in scratch at 0
  mutable ascend::ExecutorCache silu_, mul_;
};

}  // namespace polyops

#endif  // POLYOPS_ASCEND_SWIGLU_ACLNN_H_
