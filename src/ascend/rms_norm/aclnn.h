#ifndef POLYOPS_ASCEND_RMS_NORM_ACLNN_H_
#define POLYOPS_ASCEND_RMS_NORM_ACLNN_H_

#include <optional>

#include "ascend/runtime/launch.h"
#include "base/rms_norm.h"
#include "core/operator.h"

namespace polyops {

// Slot 0: aclnnRmsNorm(x, gamma, epsilon, yOut, rstdOut). x and yOut go to
// CANN with their strides (the API takes non-contiguous tensors); gamma has
// x's dtype (fp16/fp16, bf16/bf16, fp32/fp32 are all supported pairs).
// rstdOut is a mandatory FLOAT32 output of x's shape with the last dim 1
// that polyops does not return: it lives in the stream's scratch pool.
template <>
class Operator<RmsNorm, Device::Type::kAscend, 0> : public RmsNorm {
 public:
  static constexpr const char* kImplementationName = "aclnn";

  explicit Operator(const Args& args)
      : RmsNorm(args),
        eps_(args.eps),
        rstd_(ascend::RstdView(args.input, &rstd_bytes_)) {}

  void operator()(const Handle& handle, const Args& args) const override {
    if (args.out->numel() == 0) return;
    static const auto launch = ascend::Phase2("aclnnRmsNorm", "8.0.RC1");
    executor_.Run(
        kName, "aclnnRmsNorm", handle,
        {ascend::Operand::In(args.input), ascend::Operand::In(args.weight),
         ascend::Operand::Out(*args.out), ascend::Operand::Scratch(rstd_, 0)},
        rstd_bytes_, &Prepare, const_cast<Operator*>(this), launch);
  }

 private:
  static ascend::AclnnStatus Prepare(void* self, ascend::AclTensor* const* t,
                                     uint64_t* workspace,
                                     ascend::AclOpExecutor** executor) {
    using Fn = ascend::AclnnStatus (*)(
        const ascend::AclTensor*, const ascend::AclTensor*, double,
        const ascend::AclTensor*, const ascend::AclTensor*, uint64_t*,
        ascend::AclOpExecutor**);
    static const auto get =
        ascend::Phase1<Fn>("aclnnRmsNormGetWorkspaceSize", "8.0.RC1");
    return get(t[0], t[1], static_cast<Operator*>(self)->eps_, t[2], t[3],
               workspace, executor);
  }

  double eps_;
  int64_t rstd_bytes_ = 0;
  Tensor rstd_;  // rstdOut's shape and dtype; placed in scratch per call
  mutable ascend::ExecutorCache executor_;
};

}  // namespace polyops

#endif  // POLYOPS_ASCEND_RMS_NORM_ACLNN_H_
