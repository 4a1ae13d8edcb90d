// Shared validation of matmul, gemm and linear (not an op: it has no kName).
#ifndef POLYOPS_BASE_GEMM_BASE_H_
#define POLYOPS_BASE_GEMM_BASE_H_

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>

#include "core/checks.h"
#include "core/gemm_layout.h"
#include "core/instance_cache.h"

namespace polyops {

class GemmBase : public OperatorBase {
 public:
  // The result meta of op(a) @ op(b) for 2-D/3-D operands. Runs before
  // validation: anything it cannot read yields a meta the constructor
  // then rejects.
  static TensorMeta ProductMeta(const Tensor& a, bool trans_a, const Tensor& b,
                                bool trans_b) {
    TensorMeta meta = MetaLike(a);
    if (a.ndim() < 2 || a.ndim() > 3 || b.ndim() < 2 || b.ndim() > 3) {
      return meta;
    }
    const int64_t m = a.size(trans_a ? -1 : -2);
    const int64_t n = b.size(trans_b ? -2 : -1);
    if (a.ndim() == 2 && b.ndim() == 2) {
      meta.ndim = 2;
      meta.shape[0] = m;
      meta.shape[1] = n;
      return meta;
    }
    int64_t batch = a.ndim() == 3 ? a.size(0) : b.size(0);
    if (a.ndim() == 3 && b.ndim() == 3 && batch == 1) batch = b.size(0);
    meta.ndim = 3;
    meta.shape[0] = batch;
    meta.shape[1] = m;
    meta.shape[2] = n;
    return meta;
  }

 protected:
  // matmul and gemm: out = alpha * op(a) @ op(b) [+ beta * c].
  void InitProduct(const char* op, const char* a_name, const Tensor& a,
                   bool trans_a, const char* b_name, const Tensor& b,
                   bool trans_b, const std::optional<Tensor>& c,
                   const Tensor& out) {
    CheckFloatDtype(op, a_name, a);
    CheckSameDtype(op, b_name, b, a_name, a);
    CheckSameDtype(op, "out", out, a_name, a);
    CheckProductDims(op, a_name, a);
    CheckProductDims(op, b_name, b);
    GemmLayout& l = layout_;
    l.m = a.size(trans_a ? -1 : -2);
    l.k = a.size(trans_a ? -2 : -1);
    const int64_t k_b = b.size(trans_b ? -1 : -2);
    l.n = b.size(trans_b ? -2 : -1);
    POLYOPS_CHECK(l.k == k_b, "polyops.", op, ": ", b_name,
                  " must have as many rows (after any transpose) as ", a_name,
                  " has columns (", l.k, "), got ", b_name, " of shape ",
                  b.ShapeString(), " and ", a_name, " of shape ",
                  a.ShapeString());
    const int64_t batch_a = a.ndim() == 3 ? a.size(0) : 1;
    const int64_t batch_b = b.ndim() == 3 ? b.size(0) : 1;
    POLYOPS_CHECK(batch_a == batch_b || batch_a == 1 || batch_b == 1,
                  "polyops.", op, ": ", b_name, " must have the batch size of ",
                  a_name, " (", batch_a, ") or 1, got shape ", b.ShapeString());
    l.batch = std::max(batch_a, batch_b);
    l.a = MatrixOf(a, trans_a, batch_a);
    l.b = MatrixOf(b, trans_b, batch_b);

    const TensorMeta expected = ProductMeta(a, trans_a, b, trans_b);
    const std::string expected_shape =
        Tensor::DimsString(expected.shape, expected.ndim);
    bool shape_ok = out.ndim() == expected.ndim;
    for (int d = 0; shape_ok && d < expected.ndim; ++d) {
      shape_ok = out.size(d) == expected.shape[d];
    }
    POLYOPS_CHECK(shape_ok, "polyops.", op, ": out must have shape ",
                  expected_shape, ", got ", out.ShapeString());
    l.out = MatrixOf(out, false, out.ndim() == 3 ? out.size(0) : 1);

    if (c) {
      CheckSameDtype(op, "c", *c, a_name, a);
      bool broadcasts = c->ndim() <= out.ndim();
      for (int d = 1; broadcasts && d <= c->ndim(); ++d) {
        broadcasts = c->size(-d) == out.size(-d) || c->size(-d) == 1;
      }
      POLYOPS_CHECK(broadcasts, "polyops.", op,
                    ": c must have the result's shape ", expected_shape,
                    " or broadcast to it, got ", c->ShapeString());
      // Right-aligned, stride 0 where c broadcasts.
      int64_t strides[3] = {0, 0, 0};
      for (int d = 1; d <= c->ndim(); ++d) {
        strides[3 - d] = c->size(-d) == 1 ? 0 : c->stride(-d);
      }
      if (out.ndim() == 2) strides[0] = 0;
      l.has_c = true;
      l.c = GemmMatrix{strides[0], strides[1], strides[2]};
    }
    Finish(op, a_name, a, b_name, b, out);
  }

  // Validates strides and sizes of the filled-in logical layout.
  void Finish(const char* op, const char* a_name, const Tensor& a,
              const char* b_name, const Tensor& b, const Tensor& out) {
    GemmLayout& l = layout_;
    constexpr int64_t kMaxBlas = std::numeric_limits<int32_t>::max();
    POLYOPS_CHECK_T(l.m <= kMaxBlas && l.n <= kMaxBlas && l.k <= kMaxBlas,
                    NotImplemented, "polyops.", op,
                    " is not supported for matrix dims above 2**31 - 1 "
                    "because its BLAS uses 32-bit indices, got m=",
                    l.m, ", n=", l.n, ", k=", l.k);
    const bool empty = l.batch == 0 || l.m == 0 || l.n == 0;
    if (!empty && l.k > 0) {
      l.a_blas = CheckBlas(op, a_name, a, l.m, l.k, l.a);
      l.b_blas = CheckBlas(op, b_name, b, l.k, l.n, l.b);
    }
    if (!empty) {
      l.out_blas = CheckBlas(op, "out", out, l.m, l.n, l.out);
      POLYOPS_CHECK(l.batch <= 1 || l.out.batch_stride != 0, "polyops.", op,
                    ": out must not repeat one matrix over its batch dim "
                    "(stride 0), got strides ",
                    out.StridesString());
    }
    dtype_ = out.dtype();
  }

  void SetScalars(const char* op, double alpha, double beta) {
    POLYOPS_CHECK(std::isfinite(alpha), "polyops.", op,
                  ": alpha must be finite, got ", alpha);
    POLYOPS_CHECK(std::isfinite(beta), "polyops.", op,
                  ": beta must be finite, got ", beta);
    alpha_ = alpha;
    beta_ = beta;
  }

  GemmLayout layout_;
  double alpha_ = 1.0;
  double beta_ = 0.0;
  DataType dtype_ = DataType::kFloat32;

 private:
  static void CheckProductDims(const char* op, const char* name,
                               const Tensor& t) {
    POLYOPS_CHECK_T(t.ndim() == 2 || t.ndim() == 3, NotImplemented, "polyops.",
                    op, " is not supported for ", name, " of shape ",
                    t.ShapeString(),
                    " because only 2-D matrices and 3-D batches of them are "
                    "implemented");
  }

  // The logical (after transpose) matrix of a 2-D or 3-D tensor; a batch of
  // one is shared by every batch (stride 0).
  static GemmMatrix MatrixOf(const Tensor& t, bool trans, int64_t batch) {
    GemmMatrix matrix;
    matrix.batch_stride = t.ndim() == 3 && batch > 1 ? t.stride(0) : 0;
    matrix.row_stride = t.stride(trans ? -1 : -2);
    matrix.col_stride = t.stride(trans ? -2 : -1);
    return matrix;
  }

  static BlasView CheckBlas(const char* op, const char* name, const Tensor& t,
                            int64_t rows, int64_t cols,
                            const GemmMatrix& matrix) {
    const std::optional<BlasView> view =
        BlasViewOf(rows, cols, matrix.row_stride, matrix.col_stride);
    POLYOPS_CHECK(view.has_value(), "polyops.", op, ": ", name,
                  " must have unit stride in one of its last two dims (row- "
                  "or column-major, the other stride at least that dim's "
                  "size), got shape ",
                  t.ShapeString(), " with strides ", t.StridesString(),
                  " (call .contiguous() first)");
    POLYOPS_CHECK_T(view->ld <= std::numeric_limits<int32_t>::max(),
                    NotImplemented, "polyops.", op, " is not supported for ",
                    name, " with a leading stride of ", view->ld,
                    " because its BLAS uses 32-bit indices");
    return *view;
  }
};

}  // namespace polyops

#endif  // POLYOPS_BASE_GEMM_BASE_H_
