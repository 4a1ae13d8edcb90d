#ifndef POLYOPS_ASCEND_ADD_RMS_NORM_ACLNN_H_
#define POLYOPS_ASCEND_ADD_RMS_NORM_ACLNN_H_

#include <optional>

#include "ascend/runtime/launch.h"
#include "base/add_rms_norm.h"
#include "core/operator.h"

namespace polyops {

// Slot 0: aclnnAddRmsNorm(x1, x2, gamma, epsilon, yOut, rstdOut, xOut):
// xOut = x1 + x2 in x1's dtype, yOut = rms_norm(xOut) * gamma. All views
// go with their strides (the API takes non-contiguous tensors); rstdOut
// (mandatory, FLOAT32, not returned) lives in the stream's scratch pool.
// y_out / x_out may be x1 or x2 (kAliases): the kernel reads a row of x1
// and x2 before it writes that row of either output.
template <>
class Operator<AddRmsNorm, Device::Type::kAscend, 0> : public AddRmsNorm {
 public:
  static constexpr const char* kImplementationName = "aclnn";

  explicit Operator(const Args& args)
      : AddRmsNorm(args),
        eps_(args.eps),
        rstd_(ascend::RstdView(args.x1, &rstd_bytes_)) {}

  void operator()(const Handle& handle, const Args& args) const override {
    if (args.y_out->numel() == 0) return;
    static const auto launch = ascend::Phase2("aclnnAddRmsNorm", "8.0.RC1");
    executor_.Run(
        kName, "aclnnAddRmsNorm", handle,
        {ascend::Operand::In(args.x1), ascend::Operand::In(args.x2),
         ascend::Operand::In(args.gamma), ascend::Operand::Out(*args.y_out),
         ascend::Operand::Scratch(rstd_, 0), ascend::Operand::Out(*args.x_out)},
        rstd_bytes_, &Prepare, const_cast<Operator*>(this), launch);
  }

 private:
  static ascend::AclnnStatus Prepare(void* self, ascend::AclTensor* const* t,
                                     uint64_t* workspace,
                                     ascend::AclOpExecutor** executor) {
    using Fn = ascend::AclnnStatus (*)(
        const ascend::AclTensor*, const ascend::AclTensor*,
        const ascend::AclTensor*, double, ascend::AclTensor*,
        ascend::AclTensor*, ascend::AclTensor*, uint64_t*,
        ascend::AclOpExecutor**);
    static const auto get =
        ascend::Phase1<Fn>("aclnnAddRmsNormGetWorkspaceSize", "8.0.RC1");
    return get(t[0], t[1], t[2], static_cast<Operator*>(self)->eps_, t[3], t[4],
               t[5], workspace, executor);
  }

  double eps_;
  int64_t rstd_bytes_ = 0;
  Tensor rstd_;
  mutable ascend::ExecutorCache executor_;
};

}  // namespace polyops

#endif  // POLYOPS_ASCEND_ADD_RMS_NORM_ACLNN_H_
