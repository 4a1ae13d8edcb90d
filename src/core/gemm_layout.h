// Geometry of a batched matrix product out[i] = alpha * A[i] @ B[i] +
// beta * C[i] (repeated over matmul's outer batch dims), shared by matmul,
// gemm and linear and by their backends.
#ifndef POLYOPS_CORE_GEMM_LAYOUT_H_
#define POLYOPS_CORE_GEMM_LAYOUT_H_

#include <algorithm>
#include <cstdint>
#include <optional>

#include "core/elementwise_layout.h"

namespace polyops {

// One operand as a batch of logical matrices: element (i, r, c) sits at
// i * batch_stride + r * row_stride + c * col_stride. A batch stride of 0
// shares one matrix across the batch (a broadcast 2-D operand).
struct GemmMatrix {
  int64_t batch_stride = 0;
  int64_t row_stride = 0;
  int64_t col_stride = 0;
};

// How a BLAS with 32-bit indices sees a matrix: stored row-major with
// leading dim `ld` (trans = false), or column-major (trans = true: its
// transpose is row-major with leading dim `ld`).
struct BlasView {
  bool trans = false;
  int64_t ld = 1;
};

// The BLAS view of a rows x cols matrix with the given strides, if it has
// unit stride in one dim and non-overlapping lines in the other (BLAS
// requires ld >= the line length). Size-1 dims may have any stride, as in
// torch.
inline std::optional<BlasView> BlasViewOf(int64_t rows, int64_t cols,
                                          int64_t row_stride,
                                          int64_t col_stride) {
  const int64_t min_row_ld = std::max<int64_t>(cols, 1);
  const int64_t min_col_ld = std::max<int64_t>(rows, 1);
  if ((cols <= 1 || col_stride == 1) &&
      (rows <= 1 || row_stride >= min_row_ld)) {
    return BlasView{false, rows <= 1 ? min_row_ld : row_stride};
  }
  if ((rows <= 1 || row_stride == 1) &&
      (cols <= 1 || col_stride >= min_col_ld)) {
    return BlasView{true, cols <= 1 ? min_col_ld : col_stride};
  }
  return std::nullopt;
}

struct GemmLayout {
  int64_t batch = 1;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  // a: [m, k] (after any transpose), b: [k, n], c and out: [m, n]. c may
  // broadcast (stride 0 in any dim); a, b and out have BLAS views.
  GemmMatrix a, b, c, out;
  BlasView a_blas, b_blas, out_blas;
  bool has_c = false;
  // matmul's batch dims that do not merge into the one strided `batch` (a
  // [2, 1] batch broadcast against a [1, 3] one): the product above runs
  // once per element of `outer`, its operands advanced by outer.Offsets()
  // (operand order: out, a, b). A single element, no offset, otherwise.
  ElementwiseLayout<3> outer;
};

// Calls run(a, b, out) once per element of layout.outer, with the operands'
// addresses advanced to it (elements of `element_size` bytes).
template <typename Run>
void ForEachOuterProduct(const GemmLayout& layout, int element_size,
                         const void* a, const void* b, void* out, Run&& run) {
  for (int64_t i = 0; i < layout.outer.numel; ++i) {
    int64_t at[3];
    layout.outer.Offsets(i, at);
    run(static_cast<const char*>(a) + at[1] * element_size,
        static_cast<const char*>(b) + at[2] * element_size,
        static_cast<char*>(out) + at[0] * element_size);
  }
}

}  // namespace polyops

#endif  // POLYOPS_CORE_GEMM_LAYOUT_H_
