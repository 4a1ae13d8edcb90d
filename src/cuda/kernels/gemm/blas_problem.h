// How column-major cuBLAS computes the row-major polyops product of a
// GemmLayout (pure host arithmetic, no CUDA: tested on the CPU by
// tests/cuda/test_cuda_blas_problem.py).
#ifndef POLYOPS_CUDA_KERNELS_GEMM_BLAS_PROBLEM_H_
#define POLYOPS_CUDA_KERNELS_GEMM_BLAS_PROBLEM_H_

#include <cstdint>

#include "core/gemm_layout.h"

namespace polyops::cuda {

// One operand of the column-major product: the data of a or b, read with
// op = T (transpose) or N, leading dim ld, batch stride in elements.
struct BlasOperand {
  bool from_a = true;
  bool transpose = false;
  int64_t ld = 1;
  int64_t batch_stride = 0;
};

// D [rows x cols] (column-major, leading dim out_ld) = op(first) [rows x
// inner] @ op(second) [inner x cols], per batch.
struct ColumnMajorProduct {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t inner = 0;
  BlasOperand first;
  BlasOperand second;
  int64_t out_ld = 1;
  int64_t out_batch_stride = 0;
};

// A row-major matrix is its transpose stored column-major. So a row-major
// out is computed as out^T = b^T a^T (rows n, cols m), a column-major out
// directly as a b (rows m, cols n); an operand already stored in the
// orientation the product needs is read with N, the other with T. Needs the
// BLAS views of a, b and out (k > 0, a non-empty product).
inline ColumnMajorProduct ColumnMajorProductOf(const GemmLayout& l) {
  const bool row_major_out = !l.out_blas.trans;
  const BlasOperand a{true, row_major_out ? l.a_blas.trans : !l.a_blas.trans,
                      l.a_blas.ld, l.a.batch_stride};
  const BlasOperand b{false, row_major_out ? l.b_blas.trans : !l.b_blas.trans,
                      l.b_blas.ld, l.b.batch_stride};
  ColumnMajorProduct product;
  product.rows = row_major_out ? l.n : l.m;
  product.cols = row_major_out ? l.m : l.n;
  product.inner = l.k;
  product.first = row_major_out ? b : a;
  product.second = row_major_out ? a : b;
  product.out_ld = l.out_blas.ld;
  product.out_batch_stride = l.out.batch_stride;
  return product;
}

}  // namespace polyops::cuda

#endif  // POLYOPS_CUDA_KERNELS_GEMM_BLAS_PROBLEM_H_
