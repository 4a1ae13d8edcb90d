// The orientation both CPU kernel families (gemm_kernels_decode.cc and
// gemm_kernels_packed.cc, AVX-512; gemm_kernels_avx2.cc) run a product in: a
// with rows contiguous in k. A column-major a with a column-major b runs as
// out^T = b^T @ a^T; a column-major a with a row-major b has no such form
// (OpenBLAS takes it).
#ifndef POLYOPS_CPU_KERNELS_GEMM_GEMM_ORIENT_H_
#define POLYOPS_CPU_KERNELS_GEMM_GEMM_ORIENT_H_

#include <cstdint>
#include <utility>

#include "core/gemm_layout.h"

namespace polyops::cpu {

// Below this batch * m * n * k the kernels run a product on the calling
// thread: an OpenMP fork costs more than it saves.
inline constexpr double kParallelGemmWork = 65536.0 * 4;

// A product oriented for the kernels: a row-major, b row-major or
// column-major (b_col_major), out and c with any strides.
template <typename E>
struct Oriented {
  int64_t batch, m, n, k;
  const E* a;
  int64_t lda, a_batch;
  const E* b;
  int64_t ldb, b_batch;
  bool b_col_major;
};

// Whether the operands are swapped (out^T = b^T a^T); false in *possible
// when no orientation fits.
inline bool SwapOperands(const GemmLayout& l, bool* possible) {
  const bool swap = l.a_blas.trans;
  *possible = !(swap && !l.b_blas.trans);
  return swap;
}

// `l` as the kernels see it, and out's and c's strides to match.
template <typename E>
Oriented<E> Orient(const GemmLayout& l, bool swap, const void* a, const void* b,
                   GemmMatrix* out_m, GemmMatrix* c_m) {
  *out_m = l.out;
  *c_m = l.c;
  if (swap) {
    std::swap(out_m->row_stride, out_m->col_stride);
    std::swap(c_m->row_stride, c_m->col_stride);
  }
  return {l.batch,
          swap ? l.n : l.m,
          swap ? l.m : l.n,
          l.k,
          static_cast<const E*>(swap ? b : a),
          swap ? l.b_blas.ld : l.a_blas.ld,
          swap ? l.b.batch_stride : l.a.batch_stride,
          static_cast<const E*>(swap ? a : b),
          swap ? l.a_blas.ld : l.b_blas.ld,
          swap ? l.a.batch_stride : l.b.batch_stride,
          swap ? !l.a_blas.trans : l.b_blas.trans};
}

inline int64_t RoundUp(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

}  // namespace polyops::cpu

#endif  // POLYOPS_CPU_KERNELS_GEMM_GEMM_ORIENT_H_
