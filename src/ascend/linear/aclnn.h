#ifndef POLYOPS_ASCEND_LINEAR_ACLNN_H_
#define POLYOPS_ASCEND_LINEAR_ACLNN_H_

#include <optional>

#include "ascend/kernels/gemm/products.h"
#include "base/linear.h"
#include "core/operator.h"

namespace polyops {

// Slot 0: input @ weight.T with the weight as a transposed view (no
// copy), input's leading dims as the base merged them (rows, or batch and
// rows):
//   no bias: aclnnMatmul, which shares the 2-D weight over the batch;
//   bias: aclnnAddmm(self = bias, beta = alpha = 1), or aclnnBaddbmm with
//   the weight repeated over the batch by a batch stride of 0 (a view).
// The bias joins the product before the one rounding to float16/bfloat16:
// aclnnMatmul then aclnnAdd rounds twice, which misses polyops' float16
// tolerance. Whether aclnnBaddbmm takes a batch stride of 0 without a copy
// was never checked on a real toolkit (the double accepts any strides).
// cubeMathType 0 keeps float32 exact (ascend::kKeepDtype).
template <>
class Operator<Linear, Device::Type::kAscend, 0> : public Linear {
 public:
  static constexpr const char* kImplementationName = "aclnn";

  Operator(const Tensor& input, const Tensor& weight,
           const std::optional<Tensor>& bias, const std::optional<Tensor>& out)
      : Linear(input, weight, bias, out), one_(ascend::ScalarFloat(1.0)) {}

  void operator()(const Handle& handle, const Tensor& input,
                  const Tensor& weight, const std::optional<Tensor>& bias,
                  const std::optional<Tensor>& out) const override {
    if (out->numel() == 0) return;
    const GemmLayout& l = layout_;
    const bool batched = l.batch > 1;
    const Tensor x =
        ascend::MatrixView(input, l.a, l.batch, batched, l.m, l.k, *out);
    const Tensor y =
        ascend::MatrixView(*out, l.out, l.batch, batched, l.m, l.n, *out);
    const Tensor weight_t =
        ascend::MatrixView(weight, l.b, 1, false, l.k, l.n, *out);
    if (!bias) {
      ascend::RunMatmul(executor_, kName, handle, x, weight_t, y);
      return;
    }
    const Tensor weight_b =
        batched ? ascend::MatrixView(weight, l.b, l.batch, true, l.k, l.n, *out)
                : weight_t;
    ascend::RunAddmm(executor_, kName, handle, *bias, x, weight_b, one_.get(),
                     one_.get(), y);
  }

 private:
  ascend::ScalarHandle one_;
  mutable ascend::ExecutorCache executor_;
};

}  // namespace polyops

#endif  // POLYOPS_ASCEND_LINEAR_ACLNN_H_
