#ifndef POLYOPS_ASCEND_SILU_AND_MUL_ACLNN_H_
#define POLYOPS_ASCEND_SILU_AND_MUL_ACLNN_H_

#include <optional>

#include "ascend/runtime/aclnn_prepare.h"
#include "ascend/runtime/launch.h"
#include "base/silu_and_mul.h"
#include "core/operator.h"

namespace polyops {

// Slot 0: aclnnSwiGlu(x, dim = -1, out) = silu(x[..., :d]) * x[..., d:] (the
// first half is the gate). The API takes contiguous x and out only, so a
// strided input is first copied into contiguous scratch (aclnnInplaceCopy)
// and a strided out is written through contiguous scratch and copied back;
// contiguous calls (the common case) are one launch. Which copies run is
// fixed per instance (strides are part of the cache key).
template <>
class Operator<SiluAndMul, Device::Type::kAscend, 0> : public SiluAndMul {
 public:
  static constexpr const char* kImplementationName = "aclnn";

  explicit Operator(const Args& args)
      : SiluAndMul(args),
        copy_in_(!args.input.IsContiguous()),
        copy_out_(!args.out->IsContiguous()) {
    int64_t in_bytes = 0, out_bytes = 0;
    x_ = ascend::ContiguousLike(args.input, &in_bytes);
    y_ = ascend::ContiguousLike(*args.out, &out_bytes);
    out_offset_ = copy_in_ ? ascend::ScratchAlign(in_bytes) : 0;
    scratch_bytes_ = out_offset_ + (copy_out_ ? out_bytes : 0);
  }

  void operator()(const Handle& handle, const Args& args) const override {
    if (args.out->numel() == 0) return;
    static const auto swiglu = ascend::Phase2("aclnnSwiGlu", "8.0.RC1");
    static const auto copy = ascend::Phase2("aclnnInplaceCopy", "8.0.RC1");
    using ascend::Operand;
    const Operand x =
        copy_in_ ? Operand::ScratchIn(x_, 0) : Operand::In(args.input);
    const Operand y =
        copy_out_ ? Operand::Scratch(y_, out_offset_) : Operand::Out(*args.out);
    const ascend::Step in_step{
        &in_,
        "aclnnInplaceCopy",
        {Operand::ScratchRef(x_, 0), Operand::In(args.input)},
        &ascend::PrepareInplaceCopy,
        nullptr,
        copy};
    const ascend::Step glu_step{&glu_,          "aclnnSwiGlu", {x, y},
                                &PrepareSwiGlu, nullptr,       swiglu};
    const ascend::Step out_step{
        &out_,
        "aclnnInplaceCopy",
        {Operand::Ref(*args.out), Operand::ScratchIn(y_, out_offset_)},
        &ascend::PrepareInplaceCopy,
        nullptr,
        copy};
    ascend::Step steps[3];
    size_t count = 0;
    if (copy_in_) steps[count++] = in_step;
    steps[count++] = glu_step;
    if (copy_out_) steps[count++] = out_step;
    ascend::RunSteps(kName, handle, scratch_bytes_, steps, count);
  }

 private:
  static ascend::AclnnStatus PrepareSwiGlu(void*, ascend::AclTensor* const* t,
                                           uint64_t* workspace,
                                           ascend::AclOpExecutor** executor) {
    using Fn = ascend::AclnnStatus (*)(const ascend::AclTensor*, int64_t,
                                       const ascend::AclTensor*, uint64_t*,
                                       ascend::AclOpExecutor**);
    static const auto get =
        ascend::Phase1<Fn>("aclnnSwiGluGetWorkspaceSize", "8.0.RC1");
    return get(t[0], -1, t[1], workspace, executor);
  }

  bool copy_in_;
  bool copy_out_;
  Tensor x_;  // contiguous input in scratch at 0 (copy_in_)
  Tensor y_;  // contiguous out in scratch at out_offset_ (copy_out_)
  int64_t out_offset_ = 0;
  int64_t scratch_bytes_ = 0;
  mutable ascend::ExecutorCache in_, glu_, out_;
};

}  // namespace polyops

#endif  // POLYOPS_ASCEND_SILU_AND_MUL_ACLNN_H_
