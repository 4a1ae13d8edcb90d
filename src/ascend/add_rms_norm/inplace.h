#ifndef POLYOPS_ASCEND_ADD_RMS_NORM_INPLACE_H_
#define POLYOPS_ASCEND_ADD_RMS_NORM_INPLACE_H_

#include <optional>

#include "ascend/runtime/aclnn_prepare.h"
#include "ascend/runtime/launch.h"
#include "base/add_rms_norm.h"
#include "core/operator.h"

namespace polyops {

// Slot 1: aclnnInplaceAddRmsNorm(x1Ref, x2Ref, gamma, epsilon, rstdOut),
// which leaves the normalized result in x1Ref and the residual sum in
// x2Ref: vLLM's fused_add_rms_norm(input, residual) is
// add_rms_norm(input, residual, w, y_out=input, x_out=residual), one launch
// with no copy. The op runs on (y_out, x_out) once they hold the two
// addends; x1 + x2 == x2 + x1 exactly, so either may hold either:
//   y_out is x1 or x2, x_out the other one   no copy
//   one of them is an input                  the other gets the other input
//   neither                                  y_out <- x1, x_out <- x2
// (aclnnInplaceCopy, all repeatable). Aliasing is read per call (the
// bindings admit only exact aliases, so comparing addresses suffices).
template <>
class Operator<AddRmsNorm, Device::Type::kAscend, 1> : public AddRmsNorm {
 public:
  static constexpr const char* kImplementationName = "inplace";

  explicit Operator(const Args& args)
      : AddRmsNorm(args),
        eps_(args.eps),
        rstd_(ascend::RstdView(args.x1, &rstd_bytes_)) {}

  void operator()(const Handle& handle, const Args& args) const override {
    if (args.y_out->numel() == 0) return;
    static const auto norm =
        ascend::Phase2("aclnnInplaceAddRmsNorm", "8.0.RC1");
    static const auto copy = ascend::Phase2("aclnnInplaceCopy", "8.0.RC1");
    using ascend::Operand;
    const void* y = args.y_out->data();
    const void* x = args.x_out->data();
    const bool y_input = y == args.x1.data() || y == args.x2.data();
    const bool x_input = x == args.x1.data() || x == args.x2.data();
    // What y_out and x_out must receive before the op (nullptr: nothing).
    const Tensor* y_source = nullptr;
    const Tensor* x_source = nullptr;
    if (y_input && !x_input) {
      x_source = y == args.x1.data() ? &args.x2 : &args.x1;
    } else if (!y_input && x_input) {
      y_source = x == args.x1.data() ? &args.x2 : &args.x1;
    } else if (!y_input && !x_input) {
      y_source = &args.x1;
      x_source = &args.x2;
    }
    // A cache per (destination, source): the two inputs may differ in
    // strides, and a cached executor keeps its operands' geometry.
    const ascend::Step y_from_x1{
        &y_from_x1_,
        "aclnnInplaceCopy",
        {Operand::Ref(*args.y_out), Operand::In(args.x1)},
        &ascend::PrepareInplaceCopy,
        nullptr,
        copy};
    const ascend::Step y_from_x2{
        &y_from_x2_,
        "aclnnInplaceCopy",
        {Operand::Ref(*args.y_out), Operand::In(args.x2)},
        &ascend::PrepareInplaceCopy,
        nullptr,
        copy};
    const ascend::Step x_from_x1{
        &x_from_x1_,
        "aclnnInplaceCopy",
        {Operand::Ref(*args.x_out), Operand::In(args.x1)},
        &ascend::PrepareInplaceCopy,
        nullptr,
        copy};
    const ascend::Step x_from_x2{
        &x_from_x2_,
        "aclnnInplaceCopy",
        {Operand::Ref(*args.x_out), Operand::In(args.x2)},
        &ascend::PrepareInplaceCopy,
        nullptr,
        copy};
    const ascend::Step norm_step{
        &norm_,
        "aclnnInplaceAddRmsNorm",
        {Operand::Ref(*args.y_out), Operand::Ref(*args.x_out),
         Operand::In(args.gamma), Operand::Scratch(rstd_, 0)},
        &PrepareNorm,
        const_cast<Operator*>(this),
        norm};
    ascend::Step steps[3];
    size_t count = 0;
    if (y_source) steps[count++] = y_source == &args.x1 ? y_from_x1 : y_from_x2;
    if (x_source) steps[count++] = x_source == &args.x1 ? x_from_x1 : x_from_x2;
    steps[count++] = norm_step;
    ascend::RunSteps(kName, handle, rstd_bytes_, steps, count);
  }

 private:
  static ascend::AclnnStatus PrepareNorm(void* self,
                                         ascend::AclTensor* const* t,
                                         uint64_t* workspace,
                                         ascend::AclOpExecutor** executor) {
    using Fn = ascend::AclnnStatus (*)(
        ascend::AclTensor*, ascend::AclTensor*, const ascend::AclTensor*,
        double, const ascend::AclTensor*, uint64_t*, ascend::AclOpExecutor**);
    static const auto get =
        ascend::Phase1<Fn>("aclnnInplaceAddRmsNormGetWorkspaceSize", "8.0.RC1");
    return get(t[0], t[1], t[2], static_cast<Operator*>(self)->eps_, t[3],
               workspace, executor);
  }

  double eps_;
  int64_t rstd_bytes_ = 0;
  Tensor rstd_;
  mutable ascend::ExecutorCache y_from_x1_, y_from_x2_, x_from_x1_, x_from_x2_,
      norm_;
};

}  // namespace polyops

#endif  // POLYOPS_ASCEND_ADD_RMS_NORM_INPLACE_H_
