#ifndef POLYOPS_ASCEND_GEMM_ACLNN_H_
#define POLYOPS_ASCEND_GEMM_ACLNN_H_

#include <optional>

#include "ascend/kernels/gemm/products.h"
#include "base/gemm.h"
#include "core/operator.h"

namespace polyops {

// Slot 0: one launch, chosen at construction from alpha, beta and c:
//   alpha == 1, no beta term: aclnnMatmul(op(a), op(b), out);
//   otherwise aclnnAddmm (2-D) or aclnnBaddbmm (batched; a shared 2-D
//   operand as a batch-stride-0 view) with beta before alpha, self = c
//   (out may be c: the in-place accumulate), or self = out with beta = 0
//   when there is no beta term;
//   alpha == 0 or k == 0: the same call over k = 0 views of a and b, an
//   empty product, so a and b are not read (their NaNs do not propagate).
// BLAS's "beta == 0 does not read c" rests on aclnnAddmm/aclnnBaddbmm
// ignoring self when beta is 0, as torch.addmm specifies and the double
// implements; never checked on a real toolkit. trans_a/trans_b are views
// with swapped dims and strides. cubeMathType 0 keeps float32 exact
// (ascend::kKeepDtype).
template <>
class Operator<Gemm, Device::Type::kAscend, 0> : public Gemm {
 public:
  static constexpr const char* kImplementationName = "aclnn";

  explicit Operator(const Args& args)
      : Gemm(args),
        reads_c_(args.c.has_value() && args.beta != 0.0),
        empty_product_(args.alpha == 0.0 || layout_.k == 0),
        matmul_(!empty_product_ && !reads_c_ && args.alpha == 1.0),
        alpha_scalar_(ascend::ScalarFloat(args.alpha)),
        beta_scalar_(ascend::ScalarFloat(reads_c_ ? args.beta : 0.0)) {}

  void operator()(const Handle& handle, const Args& args) const override {
    if (args.out->numel() == 0) return;
    if (matmul_) {
      ascend::RunMatmul(executor_, kName, handle,
                        ascend::Transposed(args.a, args.trans_a),
                        ascend::Transposed(args.b, args.trans_b), *args.out);
      return;
    }
    const GemmLayout& l = layout_;
    const bool batched = args.out->ndim() == 3;
    const int64_t k = empty_product_ ? 0 : l.k;
    const Tensor a_view =
        ascend::MatrixView(args.a, l.a, l.batch, batched, l.m, k, *args.out);
    const Tensor b_view =
        ascend::MatrixView(args.b, l.b, l.batch, batched, k, l.n, *args.out);
    ascend::RunAddmm(executor_, kName, handle, reads_c_ ? *args.c : *args.out,
                     a_view, b_view, beta_scalar_.get(), alpha_scalar_.get(),
                     *args.out);
  }

 private:
  bool reads_c_;
  bool empty_product_;
  bool matmul_;
  ascend::ScalarHandle alpha_scalar_;
  ascend::ScalarHandle beta_scalar_;
  mutable ascend::ExecutorCache executor_;
};

}  // namespace polyops

#endif  // POLYOPS_ASCEND_GEMM_ACLNN_H_
