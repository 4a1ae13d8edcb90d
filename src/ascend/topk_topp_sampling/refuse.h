#ifndef POLYOPS_ASCEND_TOPK_TOPP_SAMPLING_REFUSE_H_
#define POLYOPS_ASCEND_TOPK_TOPP_SAMPLING_REFUSE_H_

#include <optional>
#include <string>

#include "base/topk_topp_sampling.h"
#include "core/error.h"
#include "core/operator.h"

namespace polyops {

// Slot 0: refuses, with the reason, for every input (NotImplementedError).
// polyops' topk_topp_sampling is bit-exact by contract: the tokens in
// (logit descending, id ascending) order, a specified float32 exp, a
// sequential float32 cumulative sum over that order and an exact
// threshold rule (src/base/topk_topp_sampling.h). aclnnApplyTopKTopP(logits,
// p, k, out) only filters (masked logits = -inf, with its own top-p sum
// order), and no aclnn operator computes the sort with polyops' tie rule,
// the sequential float32 sums or the Cephes exp bit for bit (aclnnCumsum's
// summation order is unspecified); sampling from the filtered logits some
// other way would return different tokens. A wrong token is worse than an
// error, so the Ascend backend has no sampling kernel: sample on CPU.
template <>
class Operator<TopkToppSampling, Device::Type::kAscend, 0>
    : public TopkToppSampling {
 public:
  static constexpr const char* kImplementationName = "refuse";

  Operator(const Tensor& logits, const ScalarOrTensor& top_k,
           const ScalarOrTensor& top_p, const std::optional<Tensor>& uniform,
           std::optional<int64_t> seed, const std::optional<Tensor>& out)
      : TopkToppSampling(logits, top_k, top_p, uniform, seed, out) {
    throw NotImplemented(Reason(dtype_));
  }

  void operator()(const Handle&, const Tensor&, const ScalarOrTensor&,
                  const ScalarOrTensor&, const std::optional<Tensor>&,
                  std::optional<int64_t>,
                  const std::optional<Tensor>&) const override {
    throw NotImplemented(Reason(dtype_));  // never built, see above
  }

 private:
  static std::string Reason(DataType dtype) {
    return detail::Concat(
        "polyops.topk_topp_sampling is not supported on npu (for any dtype, ",
        DataTypeName(dtype),
        " included): its tokens are bit-exact by contract (sorted order, a "
        "specified float32 exp and sequential float32 sums), which no aclnn "
        "route reproduces; aclnnApplyTopKTopP only filters. Sample on CPU "
        "(logits.cpu())");
  }
};

}  // namespace polyops

#endif  // POLYOPS_ASCEND_TOPK_TOPP_SAMPLING_REFUSE_H_
