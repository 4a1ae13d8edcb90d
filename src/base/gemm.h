#ifndef POLYOPS_BASE_GEMM_H_
#define POLYOPS_BASE_GEMM_H_

#include <optional>

#include "base/gemm_base.h"
#include "core/handle.h"

namespace polyops {

// gemm(a, b, c=None, *, alpha, beta, trans_a, trans_b, out) -> Tensor
//
// out = alpha * op(a) @ op(b) + beta * c, op(x) = x.mT if trans_x else x;
// 2-D, or batched 3-D with matmul's broadcasting of a 2-D operand.
// c=None means there is no beta term: beta must then be 0. As in BLAS,
// beta == 0 does not read c and alpha == 0 does not read a and b (their
// NaNs do not propagate). out may be c itself (same data and strides):
// the BLAS-style in-place accumulate c = alpha * op(a) @ op(b) + beta * c.
// Every dtype accumulates in float32 (alpha and beta rounded to float32)
// and rounds the result once (CPU: own AVX-512 kernels or OpenBLAS sgemm,
// see docs/backends/cpu_gemm.md).
//   a, b: 2-D or 3-D, float16, bfloat16 or float32, one dtype; each
//         matrix row- or column-major (unit stride in one of its last two
//         dims); the batch dim any stride.
//   c:    a's dtype, the result's shape or broadcastable to it (e.g. [n]),
//         any strides.
//   alpha, beta: finite.
//   out:  the result's shape and dtype, unit stride in one of its last two
//         dims, not overlapping a or b (nor c, unless it is c); allocated
//         contiguous when omitted.
class Gemm : public GemmBase {
 public:
  static constexpr const char* kName = "gemm";
  static constexpr int kNumPositional = 3;
  // Outputs that may be exactly these inputs (in place); any other overlap
  // is a ValueError (core/overlap.h).
  static constexpr const char* kAliases[] = {"out=c"};

  // The call's arguments, in the constructor's order. Slots take them as
  // one struct: a new parameter touches this header and the slots that
  // read it.
  struct Args {
    const Tensor& a;
    const Tensor& b;
    const std::optional<Tensor>& c;
    double alpha;
    double beta;
    bool trans_a;
    bool trans_b;
    const std::optional<Tensor>& out;
  };

  Gemm(const Tensor& a, const Tensor& b,
       const std::optional<Tensor>& c = std::nullopt, double alpha = 1.0,
       double beta = 0.0, bool trans_a = false, bool trans_b = false,
       const std::optional<Tensor>& out = std::nullopt) {
    SetScalars(kName, alpha, beta);
    POLYOPS_CHECK(c.has_value() || beta == 0.0,
                  "polyops.gemm: beta must be 0 when c is None (there is no "
                  "c to scale), got ",
                  beta);
    InitProduct(kName, "a", a, trans_a, "b", b, trans_b, c,
                RequireOutput(kName, "out", out));
  }

  explicit Gemm(const Args& args)
      : Gemm(args.a, args.b, args.c, args.alpha, args.beta, args.trans_a,
             args.trans_b, args.out) {}

  virtual void operator()(const Handle& handle, const Args& args) const = 0;

  static TensorMeta DefaultOut(const Tensor& a, const Tensor& b,
                               const std::optional<Tensor>& /*c*/,
                               double /*alpha*/, double /*beta*/, bool trans_a,
                               bool trans_b) {
    return ProductMeta(a, trans_a, b, trans_b);
  }
};

}  // namespace polyops

#endif  // POLYOPS_BASE_GEMM_H_
