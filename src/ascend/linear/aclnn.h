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

  explicit Operator(const Args& args)
      : Linear(args), one_(ascend::ScalarFloat(1.0)) {}

  void operator()(const Handle& handle, const Args& args) const override {
    if (args.out->numel() == 0) return;
    const GemmLayout& l = layout_;
    const bool batched = l.batch > 1;
    const Tensor x = ascend::MatrixView(args.input, l.a, l.batch, batched, l.m,
                                        l.k, *args.out);
    const Tensor y = ascend::MatrixView(*args.out, l.out, l.batch, batched, l.m,
                                        l.n, *args.out);
    const Tensor weight_t =
        ascend::MatrixView(args.weight, l.b, 1, false, l.k, l.n, *args.out);
    if (!args.bias) {
      ascend::RunMatmul(executor_, kName, handle, x, weight_t, y);
      return;
    }
    const Tensor weight_b = batched
                                ? ascend::MatrixView(args.weight, l.b, l.batch,
                                                     true, l.k, l.n, *args.out)
                                : weight_t;
    ascend::RunAddmm(executor_, kName, handle, *args.bias, x, weight_b,
                     one_.get(), one_.get(), y);
  }

 private:
  ascend::ScalarHandle one_;
  mutable ascend::ExecutorCache executor_;
};

}  // namespace polyops

#endif  // POLYOPS_ASCEND_LINEAR_ACLNN_H_
