#include "cpu/kernels/gemm/blas_gemm.h"

// scipy-openblas32's cblas.h declares every symbol with a `scipy_` prefix,
// so this OpenBLAS cannot clash with another BLAS in the process (torch's,
// numpy's).
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <type_traits>
#include <vector>

#include "core/dispatch.h"
#include "core/error.h"
#include "cpu/kernels/gemm/gemm_autotune.h"
#include "cpu/kernels/gemm/gemm_kernels.h"
#include "cpu/kernels/gemm/onednn.h"
#include "cpu/kernels/rows/avx512_rows.h"
#include "cpu/runtime/convert.h"
#include "cpu/runtime/parallel.h"

namespace polyops::cpu {
namespace {

// Below this m*n*k a product runs on the calling thread (OpenBLAS's own
// threshold, SMP_THRESHOLD_MIN * GEMM_MULTITHREAD_THRESHOLD = 65536 * 4 in
// its interface/gemm.c).
constexpr double kBlasSerialWork = 65536.0 * 4;

// OpenBLAS runs single-threaded, on the OpenMP threads that torch and
// polyops share: each thread calls sgemm on its own tiles of the output. With
// OpenBLAS's own pthread pool the two pools fought for the cores whenever an
// OpenMP region ran just before a threaded sgemm (gemm's copy of c into out,
// the float32 staging of float16 operands): the OpenMP threads were still
// spin-waiting when OpenBLAS's started. gemm with beta = 1 at 512^3 on 2 cores
// took 8.0 ms against matmul's 1.4 ms.
void SerialBlas() {
  static const bool once = [] {
    scipy_openblas_set_num_threads(1);
    return true;
  }();
  (void)once;
}

struct FloatMatrix {
  const float* data;
  bool trans;
  int64_t ld;
  int64_t batch_stride;
};

// c[i] = alpha * a[i] @ b[i] + beta * c[i] for i < batch, a: [m, k], b:
// [k, n], c row-major [m, n] with leading dim ldc; beta == 0 overwrites c
// without reading it (BLAS semantics). m, n >= 1.
void SgemmBatch(int64_t batch, int64_t m, int64_t n, int64_t k, float alpha,
                const FloatMatrix& a, const FloatMatrix& b, float beta,
                float* c, int64_t ldc, int64_t c_batch_stride) {
  SerialBlas();
  // Rows [r0, r0 + rows) and columns [c0, c0 + cols) of matrix i.
  const auto part = [&](int64_t i, int64_t r0, int64_t rows, int64_t c0,
                        int64_t cols) {
    scipy_cblas_sgemm(
        CblasRowMajor, a.trans ? CblasTrans : CblasNoTrans,
        b.trans ? CblasTrans : CblasNoTrans, static_cast<blasint>(rows),
        static_cast<blasint>(cols), static_cast<blasint>(k), alpha,
        a.data + i * a.batch_stride + (a.trans ? r0 : r0 * a.ld),
        static_cast<blasint>(a.ld),
        b.data + i * b.batch_stride + (b.trans ? c0 * b.ld : c0),
        static_cast<blasint>(b.ld), beta,
        c + i * c_batch_stride + r0 * ldc + c0, static_cast<blasint>(ldc));
  };
  const double work = static_cast<double>(m) * n * k;
  if (work * batch <= kBlasSerialWork) {
    for (int64_t i = 0; i < batch; ++i) part(i, 0, m, 0, n);
    return;
  }
  // Tiles of at most kTile x kTile of each output, over the threads. The
  // tiling depends on the shape alone, so each element's sum runs the same
  // way with any thread count (OpenBLAS picks its kernel, and for one row
  // or column its gemv, from the dimensions it is given).
  constexpr int64_t kTile = 256;
  const int64_t row_tiles = (m + kTile - 1) / kTile;
  const int64_t col_tiles = (n + kTile - 1) / kTile;
  const int64_t tiles = row_tiles * col_tiles;
  const bool parallel = omp_get_max_threads() > 1 && batch * tiles > 1;
  ParallelFor(batch * tiles, parallel, [&](int64_t index) {
    const int64_t i = index / tiles;
    const int64_t r0 = index % tiles / col_tiles * kTile;
    const int64_t c0 = index % col_tiles * kTile;
    part(i, r0, std::min(kTile, m - r0), c0, std::min(kTile, n - c0));
  });
}

// Row-major out = alpha * a @ b + beta * out. A column-major out is
// computed as its transpose, out^T = b^T @ a^T, so sgemm always writes
// row-major.
void SgemmInto(const GemmLayout& l, float alpha, float beta, const float* a,
               const float* b, float* out) {
  FloatMatrix fa{a, l.a_blas.trans, l.a_blas.ld, l.a.batch_stride};
  FloatMatrix fb{b, l.b_blas.trans, l.b_blas.ld, l.b.batch_stride};
  if (!l.out_blas.trans) {
    SgemmBatch(l.batch, l.m, l.n, l.k, alpha, fa, fb, beta, out, l.out_blas.ld,
               l.out.batch_stride);
    return;
  }
  fa.trans = !fa.trans;
  fb.trans = !fb.trans;
  SgemmBatch(l.batch, l.n, l.m, l.k, alpha, fb, fa, beta, out, l.out_blas.ld,
             l.out.batch_stride);
}

// out = beta * c, or 0 without c (the product term is absent: k == 0 or
// alpha == 0). Rounded once from float32.
template <typename T>
void FillScaledC(const GemmLayout& l, float beta, const T* c, T* out) {
  const bool use_c = l.has_c && beta != 0.0f;
  const bool parallel = l.batch * l.m * l.n >= kParallelGrain;
  ParallelFor(l.batch * l.m, parallel, [&](int64_t row) {
    const int64_t i = row / l.m;
    const int64_t r = row % l.m;
    T* dst = out + i * l.out.batch_stride + r * l.out.row_stride;
    const T* src = use_c ? c + i * l.c.batch_stride + r * l.c.row_stride : c;
    for (int64_t j = 0; j < l.n; ++j) {
      const float value = use_c ? beta * Load(src + j * l.c.col_stride) : 0.0f;
      Store(dst + j * l.out.col_stride, value);
    }
  });
}

// float32: sgemm reads a and b in place and writes out directly; c (when
// it is not out itself) is first copied into out for sgemm's beta term.
void RunFloat(const GemmLayout& l, float alpha, float beta, const float* a,
              const float* b, const float* c, float* out) {
  const bool use_c = l.has_c && beta != 0.0f;
  if (use_c && c != out) {
    const bool parallel = l.batch * l.m * l.n >= kParallelGrain;
    ParallelFor(l.batch * l.m, parallel, [&](int64_t row) {
      const int64_t i = row / l.m;
      const int64_t r = row % l.m;
      float* dst = out + i * l.out.batch_stride + r * l.out.row_stride;
      const float* src = c + i * l.c.batch_stride + r * l.c.row_stride;
      for (int64_t j = 0; j < l.n; ++j) {
        dst[j * l.out.col_stride] = src[j * l.c.col_stride];
      }
    });
  }
  SgemmInto(l, alpha, use_c ? beta : 0.0f, a, b, out);
}

// A batch of rows x cols matrices copied to contiguous float32 storage in
// the orientation it has (so every line converts with unit stride); a
// matrix shared by the batch (batch stride 0) is converted once.
template <typename T>
FloatMatrix StageMatrix(const T* src, const GemmMatrix& matrix,
                        const BlasView& view, int64_t batch, int64_t rows,
                        int64_t cols, float* dst) {
  const int64_t batches = matrix.batch_stride == 0 ? 1 : batch;
  const int64_t lines = view.trans ? cols : rows;
  const int64_t length = view.trans ? rows : cols;
  const bool parallel = batches * lines * length >= kParallelGrain;
  ParallelFor(batches * lines, parallel, [&](int64_t index) {
    const int64_t i = index / lines;
    const int64_t line = index % lines;
    LoadBlock(src + i * matrix.batch_stride + line * view.ld, 1,
              dst + index * length, length);
  });
  return FloatMatrix{dst, view.trans, length,
                     matrix.batch_stride == 0 ? 0 : lines * length};
}

// float16/bfloat16: a, b (and c) are converted to float32 workspaces, the
// product accumulates in float32 into a float32 result and is rounded into
// out once. The workspace is a std::vector allocated per call: its size is
// the operands' (unbounded), and converting them already costs O(size).
template <typename T>
void RunReduced(const GemmLayout& l, float alpha, float beta, const T* a,
                const T* b, const T* c, T* out) {
  const int64_t a_size = (l.a.batch_stride == 0 ? 1 : l.batch) * l.m * l.k;
  const int64_t b_size = (l.b.batch_stride == 0 ? 1 : l.batch) * l.k * l.n;
  const int64_t c_size = l.batch * l.m * l.n;
  std::vector<float> work(a_size + b_size + c_size);
  float* wa = work.data();
  float* wb = wa + a_size;
  float* wc = wb + b_size;
  const FloatMatrix fa = StageMatrix(a, l.a, l.a_blas, l.batch, l.m, l.k, wa);
  const FloatMatrix fb = StageMatrix(b, l.b, l.b_blas, l.batch, l.k, l.n, wb);
  const bool use_c = l.has_c && beta != 0.0f;
  const int64_t rows = l.batch * l.m;
  const bool parallel = c_size >= kParallelGrain;
  if (use_c) {
    ParallelFor(rows, parallel, [&](int64_t row) {
      const int64_t i = row / l.m;
      const int64_t r = row % l.m;
      LoadBlock(c + i * l.c.batch_stride + r * l.c.row_stride, l.c.col_stride,
                wc + row * l.n, l.n);
    });
  }
  SgemmBatch(l.batch, l.m, l.n, l.k, alpha, fa, fb, use_c ? beta : 0.0f, wc,
             l.n, l.m * l.n);
  ParallelFor(rows, parallel, [&](int64_t row) {
    const int64_t i = row / l.m;
    const int64_t r = row % l.m;
    StoreBlock(wc + row * l.n,
               out + i * l.out.batch_stride + r * l.out.row_stride,
               l.out.col_stride, l.n);
  });
}

enum class GemmChoice { kAuto, kOneDnn, kOwn, kOpenBlas };

// POLYOPS_CPU_GEMM, read per call so that tests and benchmarks can switch
// paths in one process (a getenv is ~50 ns next to a product's microseconds).
GemmChoice ChosenPath(const char* op) {
  const char* value = std::getenv("POLYOPS_CPU_GEMM");
  if (value == nullptr || *value == '\0' || std::strcmp(value, "auto") == 0) {
    return GemmChoice::kAuto;
  }
  if (std::strcmp(value, "onednn") == 0) return GemmChoice::kOneDnn;
  if (std::strcmp(value, "own") == 0) return GemmChoice::kOwn;
  if (std::strcmp(value, "openblas") == 0) return GemmChoice::kOpenBlas;
  throw InvalidArgument(detail::Concat(
      "polyops.", op,
      ": environment variable POLYOPS_CPU_GEMM must be auto, onednn, own or "
      "openblas, got '",
      value, "'"));
}

// auto runs oneDNN past the decode rows (m > kSmallM), where the product
// is compute bound and oneDNN's brgemm kernels beat the own packed ones:
// float32 where its ISA has AVX-512 (23 of 25 comparisons on Zen 4),
// bfloat16 where it has AVX512-BF16 (on a quiet Zen 4, 1.1-2.2x the own
// bf16-packed kernel from m = 33 to 4096 x 11008 x 4096, within 3 % of
// torch's oneDNN), which includes AMX, whose tile units the own kernels
// cannot use (docs/backends/cpu_gemm.md). Decode rows are bound by reading the
// weight; there the own kernels measured faster. The polyops ISA check
// comes first: POLYOPS_CPU_ISA caps it, not oneDNN's.
bool PreferOneDnn(const GemmLayout& l, DataType dtype) {
  const int64_t rows = l.out_blas.trans ? l.n : l.m;  // the kernels' m
  if (rows <= kSmallM) return false;
  if (dtype == DataType::kFloat32) {
    // Without AVX-512, float32 past the decode rows would run OpenBLAS, which
    // measured 0.23-1.18x torch on AMD Zen 3 where oneDNN's AVX2 kernels
    // measured 0.98-1.37x (docs/perf/cpu_gemm.md). A oneDNN that runs
    // AVX-512 kernels where polyops is capped below (POLYOPS_CPU_ISA) is not
    // taken.
    if (HasAvx512()) return onednn::HasAvx512();
    return HasAvx2() && onednn::HasAvx2() && !onednn::HasAvx512();
  }
  if (dtype == DataType::kBFloat16) {
    return HasAvx512Bf16() && onednn::HasAvx512Bf16();
  }
  return false;
}

// Runs the product on `path` into `out` and says so, or returns false
// without touching out when the path does not take this product (oneDNN
// unavailable or declining, the own kernels not applying).
template <typename T>
bool RunPath(autotune::Path path, const char* op, const GemmLayout& l,
             DataType dtype, float alpha, float beta, const T* a, const T* b,
             const T* c, T* out) {
  switch (path) {
    case autotune::Path::kOneDnn:
      if (!onednn::Gemm(op, l, dtype, alpha, beta, a, b, c, out)) return false;
      SetLastGemmPath("onednn");
      return true;
    case autotune::Path::kOwn:
      return KernelGemm(l, dtype, alpha, beta, a, b, c, out);
    case autotune::Path::kOpenBlas:
      SetLastGemmPath("openblas");
      if constexpr (std::is_same_v<T, float>) {
        RunFloat(l, alpha, beta, a, b, c, out);
      } else {
        RunReduced(l, alpha, beta, a, b, c, out);
      }
      return true;
  }
  return false;
}

// Elements from the first to the last one a [batch, rows, cols] operand
// with these strides spans (strides are never negative).
int64_t Extent(int64_t batch, int64_t rows, int64_t cols, const GemmMatrix& m) {
  return 1 + (batch - 1) * m.batch_stride + (rows - 1) * m.row_stride +
         (cols - 1) * m.col_stride;
}

// Times every path that takes this product, each writing the same scratch
// output (out's strides, so the own kernels see out's layout), and records
// the fastest. The caller's out is not touched; inputs are only read.
template <typename T>
autotune::Path Measure(const autotune::Key& key, const char* op,
                       const GemmLayout& l, DataType dtype, float alpha,
                       float beta, const T* a, const T* b, const T* c) {
  std::vector<T> scratch(static_cast<size_t>(Extent(l.batch, l.m, l.n, l.out)));
  autotune::Entry entry{op, key, autotune::Path::kOpenBlas, {}};
  double best = 0.0;
  for (autotune::Path path : {autotune::Path::kOneDnn, autotune::Path::kOwn,
                              autotune::Path::kOpenBlas}) {
    auto run_once = [&] {
      const auto start = std::chrono::steady_clock::now();
      const bool ran =
          RunPath(path, op, l, dtype, alpha, beta, a, b, c, scratch.data());
      const std::chrono::duration<double, std::micro> took =
          std::chrono::steady_clock::now() - start;
      return ran ? took.count() : -1.0;
    };
    // The first run pays for packing, primitive creation and cold caches.
    const double first = run_once();
    if (first < 0) continue;
    // Three more where one takes under 20 ms; the best of them counts.
    double fastest = run_once();
    for (int i = 0; i < 2 && fastest < 20000.0; ++i) {
      fastest = std::min(fastest, run_once());
    }
    entry.timings_us.emplace_back(path, fastest);
    if (entry.timings_us.size() == 1 || fastest < best) {
      best = fastest;
      entry.pick = path;
    }
  }
  const autotune::Path pick = entry.pick;
  autotune::Record(std::move(entry));
  return pick;
}

}  // namespace

bool GemmHasAvx512Bf16() { return HasAvx512Bf16(); }

void BlasGemm(const char* op, const GemmLayout& l, DataType dtype, double alpha,
              double beta, const void* a, const void* b, const void* c,
              void* out) {
  if (l.batch == 0 || l.m == 0 || l.n == 0) return;
  const auto alpha_f = static_cast<float>(alpha);
  const auto beta_f = static_cast<float>(beta);
  const GemmChoice choice = ChosenPath(op);
  SetLastGemmPath("openblas");
  DispatchDataType<POLYOPS_FLOAT_TYPES>(dtype, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* ta = static_cast<const T*>(a);
    const T* tb = static_cast<const T*>(b);
    const T* tc = static_cast<const T*>(c);
    T* tout = static_cast<T*>(out);
    auto run = [&](autotune::Path path) {
      return RunPath(path, op, l, dtype, alpha_f, beta_f, ta, tb, tc, tout);
    };
    if (l.k == 0 || alpha_f == 0.0f) {
      FillScaledC(l, beta_f, tc, tout);
      return;
    }
    if (choice == GemmChoice::kAuto && autotune::Enabled()) {
      const autotune::Key key = autotune::MakeKey(
          l, dtype, l.has_c && beta_f != 0.0f, alpha_f == 1.0f);
      const std::optional<autotune::Path> known = autotune::Find(key);
      const autotune::Path pick =
          known ? *known
                : Measure(key, op, l, dtype, alpha_f, beta_f, ta, tb, tc);
      // A pick loaded from another process may no longer apply (oneDNN
      // not loadable here): the fixed rules below run instead.
      if (run(pick)) return;
    }
    if ((choice == GemmChoice::kOneDnn ||
         (choice == GemmChoice::kAuto && PreferOneDnn(l, dtype))) &&
        run(autotune::Path::kOneDnn)) {
      return;
    }
    if (choice != GemmChoice::kOpenBlas && run(autotune::Path::kOwn)) return;
    run(autotune::Path::kOpenBlas);
  });
}

}  // namespace polyops::cpu
