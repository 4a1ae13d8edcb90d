// Checks cuda::ColumnMajorProductOf (src/cuda/kernels/gemm/blas_problem.h) on
// the CPU: for every orientation of a, b and out (row- or column-major, padded
// leading dims), batches with a broadcast operand and size-1 dims, the product
// that column-major cuBLAS computes from it -- evaluated here by the documented
// cublasGemmStridedBatchedEx formula -- must equal the logical product.
// Integer-valued data, so both sums are exact. Prints the number of layouts
// checked; exits 1 at the first mismatch.
#include <cstdio>
#include <vector>

#include "cuda/kernels/gemm/blas_problem.h"

namespace {

using polyops::BlasViewOf;
using polyops::GemmLayout;
using polyops::GemmMatrix;

struct Stored {
  std::vector<double> data;
  GemmMatrix matrix;
};

// A batch of rows x cols matrices, row- or column-major with padded lines;
// batch stride 0 when shared.
Stored Make(int64_t batch, int64_t rows, int64_t cols, bool column_major,
            bool shared, int seed) {
  const int64_t pad = 2;
  const int64_t ld = (column_major ? rows : cols) + pad;
  const int64_t lines = column_major ? cols : rows;
  const int64_t matrix_size = ld * lines + 3;
  Stored stored;
  stored.matrix.batch_stride = shared ? 0 : matrix_size;
  stored.matrix.row_stride = column_major ? 1 : ld;
  stored.matrix.col_stride = column_major ? ld : 1;
  stored.data.resize((shared ? 1 : batch) * matrix_size);
  for (size_t i = 0; i < stored.data.size(); ++i) {
    stored.data[i] = static_cast<double>((i * 7 + seed * 13) % 11) - 5;
  }
  return stored;
}

double At(const std::vector<double>& data, const GemmMatrix& m, int64_t i,
          int64_t r, int64_t c) {
  return data[i * m.batch_stride + r * m.row_stride + c * m.col_stride];
}

// cublasGemmStridedBatchedEx: D[i] = op(A[i]) op(B[i]), column-major.
void ColumnMajorGemm(const polyops::cuda::ColumnMajorProduct& p, int64_t batch,
                     const double* first, const double* second, double* out) {
  for (int64_t i = 0; i < batch; ++i) {
    const double* a = first + i * p.first.batch_stride;
    const double* b = second + i * p.second.batch_stride;
    double* d = out + i * p.out_batch_stride;
    for (int64_t r = 0; r < p.rows; ++r) {
      for (int64_t c = 0; c < p.cols; ++c) {
        double sum = 0;
        for (int64_t x = 0; x < p.inner; ++x) {
          const double av =
              p.first.transpose ? a[x + r * p.first.ld] : a[r + x * p.first.ld];
          const double bv = p.second.transpose ? b[c + x * p.second.ld]
                                               : b[x + c * p.second.ld];
          sum += av * bv;
        }
        d[r + c * p.out_ld] = sum;
      }
    }
  }
}

}  // namespace

int main() {
  int checked = 0;
  const int64_t dims[][3] = {{3, 5, 4}, {1, 5, 4}, {3, 1, 4}, {3, 5, 1}};
  for (const auto& dim : dims) {
    const int64_t m = dim[0], n = dim[1], k = dim[2];
    for (int64_t batch : {1, 3}) {
      for (int flags = 0; flags < 32; ++flags) {
        const bool a_col = flags & 1, b_col = flags & 2, out_col = flags & 4;
        const bool a_shared = batch > 1 && (flags & 8);
        const bool b_shared = batch > 1 && (flags & 16);
        Stored a = Make(batch, m, k, a_col, a_shared, 1);
        Stored b = Make(batch, k, n, b_col, b_shared, 2);
        Stored out = Make(batch, m, n, out_col, false, 3);
        GemmLayout l;
        l.batch = batch;
        l.m = m;
        l.n = n;
        l.k = k;
        l.a = a.matrix;
        l.b = b.matrix;
        l.out = out.matrix;
        l.a_blas = *BlasViewOf(m, k, l.a.row_stride, l.a.col_stride);
        l.b_blas = *BlasViewOf(k, n, l.b.row_stride, l.b.col_stride);
        l.out_blas = *BlasViewOf(m, n, l.out.row_stride, l.out.col_stride);
        const polyops::cuda::ColumnMajorProduct p =
            polyops::cuda::ColumnMajorProductOf(l);
        const double* first = p.first.from_a ? a.data.data() : b.data.data();
        const double* second = p.second.from_a ? a.data.data() : b.data.data();
        ColumnMajorGemm(p, batch, first, second, out.data.data());
        for (int64_t i = 0; i < batch; ++i) {
          for (int64_t r = 0; r < m; ++r) {
            for (int64_t c = 0; c < n; ++c) {
              double want = 0;
              for (int64_t x = 0; x < k; ++x) {
                want += At(a.data, l.a, i, r, x) * At(b.data, l.b, i, x, c);
              }
              const double got = At(out.data, l.out, i, r, c);
              if (got != want) {
                std::printf(
                    "mismatch m=%lld n=%lld k=%lld batch=%lld flags=%d at "
                    "(%lld, %lld, %lld): %g != %g\n",
                    static_cast<long long>(m), static_cast<long long>(n),
                    static_cast<long long>(k), static_cast<long long>(batch),
                    flags, static_cast<long long>(i), static_cast<long long>(r),
                    static_cast<long long>(c), got, want);
                return 1;
              }
            }
          }
        }
        ++checked;
      }
    }
  }
  std::printf("%d\n", checked);
  return 0;
}
