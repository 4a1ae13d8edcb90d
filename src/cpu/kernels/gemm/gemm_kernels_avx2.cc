// The matrix products for CPUs with AVX2 + FMA but not the AVX-512 kernels
// of gemm_kernels_decode.cc and gemm_kernels_packed.cc: float32 and bfloat16
// read in place (bfloat16 widened to float32 in registers, never converted into
// a workspace), summed with FMA in float32. Decode sizes (m <= kSmallM) read
// the weight once per call, which is what these memory-bound shapes need;
// larger bfloat16 products run as decode products of up to kSmallM rows each.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "cpu/kernels/gemm/gemm_kernels.h"
#include "cpu/kernels/gemm/gemm_orient.h"
#include "cpu/runtime/convert.h"

namespace polyops::cpu {
namespace {

// k values per dot step: one 256-bit load of E.
template <typename E>
inline constexpr int kDotStep = 32 / static_cast<int>(sizeof(E));
// float32 vectors per dot step: a bfloat16 load splits into its even and
// odd elements (both sum into the same dot, so the split costs nothing).
template <typename E>
inline constexpr int kParts = std::is_same_v<E, float> ? 1 : 2;

// kDotStep<E> values at p as float32 vectors. bfloat16: the even elements
// are the low halves of the 32-bit lanes (shifted up 16 bits), the odd ones
// the high halves (the low bits cleared): two instructions for 16 values.
POLYOPS_TARGET_AVX2 POLYOPS_INLINE void LoadDot(const float* p,
                                                __m256 (&v)[1]) {
  v[0] = _mm256_loadu_ps(p);
}
POLYOPS_TARGET_AVX2 POLYOPS_INLINE void LoadDot(const uint16_t* p,
                                                __m256 (&v)[2]) {
  const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  v[0] = _mm256_castsi256_ps(_mm256_slli_epi32(bits, 16));
  v[1] = _mm256_castsi256_ps(
      _mm256_and_si256(bits, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
}

// 8 values of a row of b (8 consecutive output columns) as float32; lanes
// past `lanes` are zero and not read.
POLYOPS_TARGET_AVX2 POLYOPS_INLINE __m256 LoadRow(const float* p, int lanes) {
  if (lanes >= 8) return _mm256_loadu_ps(p);
  const __m256i mask = _mm256_cmpgt_epi32(
      _mm256_set1_epi32(lanes), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  return _mm256_maskload_ps(p, mask);
}
POLYOPS_TARGET_AVX2 POLYOPS_INLINE __m256 LoadRow(const uint16_t* p,
                                                  int lanes) {
  __m128i bits;
  if (lanes >= 8) {
    bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  } else {
    alignas(16) uint16_t part[8] = {};
    std::memcpy(part, p, sizeof(uint16_t) * std::max(lanes, 0));
    bits = _mm_load_si128(reinterpret_cast<const __m128i*>(part));
  }
  // vpmovzxwd + vpslld: bfloat16 bits are the high half of a float32.
  return _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
}

POLYOPS_TARGET_AVX2 POLYOPS_INLINE __m256 Broadcast(const float* p) {
  return _mm256_broadcast_ss(p);
}
POLYOPS_TARGET_AVX2 POLYOPS_INLINE __m256 Broadcast(const uint16_t* p) {
  return _mm256_castsi256_ps(
      _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(*p) << 16)));
}

// The sum of v's 8 lanes, in a fixed order.
POLYOPS_TARGET_AVX2 POLYOPS_INLINE float Sum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// part[i][j] (+)= lane-wise partial sums of a[i][0:kc] . b[j][0:kc] for
// i < MR, j < NR: rows of a and columns of b both contiguous in k (x @
// weight.T). The 8 lanes of each sum are kept (`part`, NR vectors per row
// of the tile, rows kPartCols apart) and reduced once after the last k pass.
constexpr int kPartCols = 4;
template <typename E, int MR, int NR>
POLYOPS_TARGET_AVX2 void DotTile(const E* a, int64_t lda, const E* b,
                                 int64_t ldb, int64_t kc, float* part,
                                 bool accumulate) {
  constexpr int kStep = kDotStep<E>;
  constexpr int kP = kParts<E>;
  __m256 acc[MR][NR];
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) {
      acc[i][j] = accumulate ? _mm256_loadu_ps(part + 8 * (i * kPartCols + j))
                             : _mm256_setzero_ps();
    }
  }
  const auto step = [&](const E* ap, int64_t a_ld, const E* bp,
                        int64_t b_ld) POLYOPS_TARGET_AVX2 {
    __m256 bv[NR][kP];
    for (int j = 0; j < NR; ++j) LoadDot(bp + j * b_ld, bv[j]);
    for (int i = 0; i < MR; ++i) {
      __m256 av[kP];
      LoadDot(ap + i * a_ld, av);
      for (int q = 0; q < kP; ++q) {
        for (int j = 0; j < NR; ++j) {
          acc[i][j] = _mm256_fmadd_ps(av[q], bv[j][q], acc[i][j]);
        }
      }
    }
  };
  int64_t p = 0;
  for (; p + kStep <= kc; p += kStep) {
    // The weight's rows are a few DRAM streams per thread; the hardware
    // prefetchers alone kept them at half of torch's bandwidth (m = 1).
    for (int j = 0; j < NR; ++j) {
      __builtin_prefetch(reinterpret_cast<const char*>(b + j * ldb + p) + 1024);
    }
    step(a + p, lda, b + p, ldb);
  }
  if (p < kc) {
    // The last k values, zero-padded to one step.
    const int rest = static_cast<int>(kc - p);
    alignas(32) E ta[MR][kStep] = {};
    alignas(32) E tb[NR][kStep] = {};
    for (int i = 0; i < MR; ++i)
      std::memcpy(ta[i], a + i * lda + p, rest * sizeof(E));
    for (int j = 0; j < NR; ++j)
      std::memcpy(tb[j], b + j * ldb + p, rest * sizeof(E));
    step(&ta[0][0], kStep, &tb[0][0], kStep);
  }
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) {
      _mm256_storeu_ps(part + 8 * (i * kPartCols + j), acc[i][j]);
    }
  }
}

// part[0] (+)= lane-wise partial sums of a[0:kc] . b[0:kc]: one row of a
// against one column of b. A column at a time reads the weight as one
// sequential stream (its rows are contiguous), which the hardware
// prefetchers follow; DotTile's 4 interleaved columns were 4 streams of one
// row each (m = 1, bfloat16, from DRAM: 24 against torch's 33 GB/s on 2
// cores). kU steps per iteration into their own accumulators hide the FMA
// latency.
template <typename E>
POLYOPS_TARGET_AVX2 void DotRowTile(const E* a, int64_t, const E* b, int64_t,
                                    int64_t kc, float* part, bool accumulate) {
  constexpr int kStep = kDotStep<E>;
  constexpr int kP = kParts<E>;
  constexpr int kU = 4;
  __m256 acc[kU][kP];
  for (int u = 0; u < kU; ++u) {
    for (int q = 0; q < kP; ++q) acc[u][q] = _mm256_setzero_ps();
  }
  if (accumulate) acc[0][0] = _mm256_loadu_ps(part);
  const auto step = [&](const E* ap, const E* bp, int u) POLYOPS_TARGET_AVX2 {
    __m256 av[kP], bv[kP];
    LoadDot(ap, av);
    LoadDot(bp, bv);
    for (int q = 0; q < kP; ++q) {
      acc[u][q] = _mm256_fmadd_ps(av[q], bv[q], acc[u][q]);
    }
  };
  int64_t p = 0;
  for (; p + kU * kStep <= kc; p += kU * kStep) {
    for (int u = 0; u < kU; ++u) step(a + p + u * kStep, b + p + u * kStep, u);
  }
  for (; p + kStep <= kc; p += kStep) step(a + p, b + p, 0);
  if (p < kc) {
    alignas(32) E ta[kStep] = {};
    alignas(32) E tb[kStep] = {};
    std::memcpy(ta, a + p, (kc - p) * sizeof(E));
    std::memcpy(tb, b + p, (kc - p) * sizeof(E));
    step(ta, tb, 0);
  }
  __m256 sum = acc[0][0];
  for (int u = 0; u < kU; ++u) {
    for (int q = u == 0 ? 1 : 0; q < kP; ++q) {
      sum = _mm256_add_ps(sum, acc[u][q]);
    }
  }
  _mm256_storeu_ps(part, sum);
}

// dst[i][0:8 * NV] (+)= sum over p < kc of a[i][p] * b[p][0:8 * NV] for
// i < MR: b row-major (x @ w), its rows read in place in runs of the tile's
// width; `cols` <= 8 * NV columns are valid (a full tile loads without
// masks). dst rows are padded to whole tiles.
template <typename E, int MR, int NV, bool kFull>
POLYOPS_TARGET_AVX2 POLYOPS_INLINE void AxpyTileBody(
    const E* a, int64_t lda, const E* b, int64_t ldb, int64_t kc, int cols,
    float* dst, int64_t ld_dst, bool accumulate, const E* pf, int pf_rows) {
  // Every loop over the tile is unrolled before scalar replacement: left to
  // the late unroller, GCC 12 kept `acc` an array in memory and stored all
  // 12 accumulators to the stack on every k step (12 stores per 12 FMAs,
  // half speed: 43 against 85 GFLOP/s in cache at m = 32).
  __m256 acc[MR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm256_setzero_ps();
  }
  // Prefetches pf_rows rows of the tile's width at pf (ldb apart), spread
  // over the k steps.
  const int64_t spacing = std::max<int64_t>(1, kc / std::max(pf_rows, 1));
  int64_t pf_due = 0;
  int pf_done = 0;
  for (int64_t p = 0; p < kc; ++p) {
    if (p == pf_due && pf_done < pf_rows) {
      const char* row = reinterpret_cast<const char*>(pf + pf_done * ldb);
      for (int line = 0; line < 8 * NV * static_cast<int>(sizeof(E));
           line += 64) {
        __builtin_prefetch(row + line);
      }
      ++pf_done;
      pf_due += spacing;
    }
    __m256 av[MR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) av[i] = Broadcast(a + i * lda + p);
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      const __m256 bv = LoadRow(b + p * ldb + 8 * v, kFull ? 8 : cols - 8 * v);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        acc[i][v] = _mm256_fmadd_ps(av[i], bv, acc[i][v]);
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      float* d = dst + i * ld_dst + 8 * v;
      __m256 value = acc[i][v];
      if (accumulate) value = _mm256_add_ps(value, _mm256_loadu_ps(d));
      _mm256_storeu_ps(d, value);
    }
  }
}

template <typename E, int MR, int NV>
POLYOPS_TARGET_AVX2 void AxpyTile(const E* a, int64_t lda, const E* b,
                                  int64_t ldb, int64_t kc, int cols, float* dst,
                                  int64_t ld_dst, bool accumulate, const E* pf,
                                  int pf_rows) {
  if (cols == 8 * NV) {
    AxpyTileBody<E, MR, NV, true>(a, lda, b, ldb, kc, cols, dst, ld_dst,
                                  accumulate, pf, pf_rows);
  } else {
    AxpyTileBody<E, MR, NV, false>(a, lda, b, ldb, kc, cols, dst, ld_dst,
                                   accumulate, pf, pf_rows);
  }
}

template <typename E>
using DotFn = void (*)(const E*, int64_t, const E*, int64_t, int64_t, float*,
                       bool);
template <typename E>
using AxpyFn = void (*)(const E*, int64_t, const E*, int64_t, int64_t, int,
                        float*, int64_t, bool, const E*, int);

// Tile tables indexed by the tile's rows (and columns): up to R x C.
template <typename E, int R, int C, int... I>
constexpr std::array<DotFn<E>, R * C> MakeDotTable(
    std::integer_sequence<int, I...>) {
  return {&DotTile<E, I / C + 1, I % C + 1>...};
}
template <typename E, int NV, int... I>
constexpr std::array<AxpyFn<E>, sizeof...(I)> MakeAxpyTable(
    std::integer_sequence<int, I...>) {
  return {&AxpyTile<E, I + 1, NV>...};
}

// Dot tile shapes, by dtype and m, sized to the 16 ymm registers
// (accumulators + the tile's b vectors + a row's vectors).
template <typename E>
struct DotShape {
  // float32: 4 x 3 (12 + 3 + 1); bfloat16: 4 x 2 (8 + 4 + 2). One row of
  // a: DotRowTile, a column at a time.
  static constexpr int kRows = 4;
  static constexpr int kCols = std::is_same_v<E, float> ? 3 : 2;
  static_assert(kCols <= kPartCols);
};

// out = alpha * (a @ b) (+ beta * c) for one column block [j0, j0 + cols)
// of matrix bi: float32 sums in `block` (rows x pitch), then FinishRow.
template <typename T>
POLYOPS_TARGET_AVX2 void FinishRows(float* block, int64_t pitch, int64_t rows,
                                    int64_t cols, int64_t bi, int64_t j0,
                                    float alpha, float beta, const T* c,
                                    const GemmMatrix& c_m, T* out,
                                    const GemmMatrix& out_m) {
  constexpr int64_t kChunk = 256;
  alignas(32) float c_values[kChunk];
  for (int64_t i = 0; i < rows; ++i) {
    float* sums = block + i * pitch;
    for (int64_t j = 0; j < cols; j += kChunk) {
      const int64_t len = std::min(kChunk, cols - j);
      float* s = sums + j;
      // alpha * sum + beta * c in float32, rounded once (as the AVX-512
      // epilogue; the build never contracts it into an FMA).
      if (alpha != 1.0f) {
        for (int64_t t = 0; t < len; ++t) s[t] = s[t] * alpha;
      }
      if (c != nullptr) {
        LoadBlock(c + bi * c_m.batch_stride + i * c_m.row_stride +
                      (j0 + j) * c_m.col_stride,
                  c_m.col_stride, c_values, len);
        for (int64_t t = 0; t < len; ++t) s[t] = s[t] + beta * c_values[t];
      }
      StoreBlock(s,
                 out + bi * out_m.batch_stride + i * out_m.row_stride +
                     (j0 + j) * out_m.col_stride,
                 out_m.col_stride, len);
    }
  }
}

// The dot form (b column-major) of matrix bi, columns [j0, j0 + cols):
// per tile of columns, k in passes of 2 KiB of each row (for more than one
// row tile: the tile's b columns then stay in L1 while a's rows stream past
// from L2), the 8 lanes of every sum kept across passes and reduced once.
template <typename E>
POLYOPS_TARGET_AVX2 void DotBlock(const Oriented<E>& o, int64_t bi, int64_t j0,
                                  int64_t cols, float* block, int64_t pitch) {
  using S = DotShape<E>;
  static constexpr auto kTable = MakeDotTable<E, S::kRows, S::kCols>(
      std::make_integer_sequence<int, S::kRows * S::kCols>());
  const bool one_row = o.m == 1;
  const int col_tile = one_row ? 1 : S::kCols;
  const int64_t kc = o.m <= S::kRows ? o.k : 2048 / sizeof(E);
  const E* a = o.a + bi * o.a_batch;
  const E* b = o.b + bi * o.b_batch;
  alignas(32) float part[kSmallM * kPartCols * 8];
  for (int64_t jr = 0; jr < cols; jr += col_tile) {
    const int nr = static_cast<int>(std::min<int64_t>(col_tile, cols - jr));
    const E* bj = b + (j0 + jr) * o.ldb;
    for (int64_t p0 = 0; p0 < o.k; p0 += kc) {
      const int64_t len = std::min(kc, o.k - p0);
      for (int64_t ir = 0; ir < o.m; ir += S::kRows) {
        const int mr = static_cast<int>(std::min<int64_t>(S::kRows, o.m - ir));
        const DotFn<E> fn =
            one_row ? &DotRowTile<E> : kTable[(mr - 1) * S::kCols + (nr - 1)];
        fn(a + ir * o.lda + p0, o.lda, bj + p0, o.ldb, len,
           part + 8 * kPartCols * ir, p0 > 0);
      }
    }
    for (int64_t i = 0; i < o.m; ++i) {
      for (int j = 0; j < nr; ++j) {
        block[i * pitch + jr + j] =
            Sum8(_mm256_load_ps(part + 8 * (i * kPartCols + j)));
      }
    }
  }
}

// The row form (b row-major) of matrix bi, columns [j0, j0 + cols): k in
// passes of kc rows of b, each pass sweeping the column block tile by tile
// (a few long runs per row of b for the prefetchers), the tile's float32
// sums added into `block` after each pass.
template <typename E>
POLYOPS_TARGET_AVX2 void AxpyBlock(const Oriented<E>& o, int64_t bi, int64_t j0,
                                   int64_t cols, int64_t kc, float* block,
                                   int64_t pitch) {
  // Tiles by rows of a: 1 x 64 columns (8 accumulators), 2 x 48 (12), 3 x
  // 32 (12 accumulators + 3 broadcasts + 1 row of b: the 16 ymm).
  static constexpr auto kOne =
      MakeAxpyTable<E, 8>(std::make_integer_sequence<int, 1>());
  static constexpr auto kTwo =
      MakeAxpyTable<E, 6>(std::make_integer_sequence<int, 2>());
  static constexpr auto kThree =
      MakeAxpyTable<E, 4>(std::make_integer_sequence<int, 3>());
  const AxpyFn<E>* table = o.m == 1   ? kOne.data()
                           : o.m == 2 ? kTwo.data()
                                      : kThree.data();
  const int64_t row_tile = std::min<int64_t>(o.m, 3);
  const int64_t col_tile = o.m == 1 ? 64 : o.m == 2 ? 48 : 32;
  const E* a = o.a + bi * o.a_batch;
  const E* b = o.b + bi * o.b_batch + j0;
  for (int64_t p0 = 0; p0 < o.k; p0 += kc) {
    const int64_t len = std::min(kc, o.k - p0);
    for (int64_t jr = 0; jr < cols; jr += col_tile) {
      const int nr = static_cast<int>(std::min(col_tile, cols - jr));
      // The tile's kc rows of b are kc runs a whole row of b apart, too short
      // for the hardware prefetchers (m = 32: 49 GFLOP/s on one core, 97 in
      // cache): its row tiles fetch the next tile's rows (after the last
      // tile, the next pass's first), each row tile an even share of them.
      const bool last = jr + col_tile >= cols;
      const int64_t next =
          last ? (p0 + kc) * o.ldb : p0 * o.ldb + jr + col_tile;
      const int64_t next_len =
          last ? std::clamp<int64_t>(o.k - p0 - kc, 0, kc) : len;
      const int64_t n_row_tiles = (o.m + row_tile - 1) / row_tile;
      for (int64_t t = 0; t < n_row_tiles; ++t) {
        const int64_t ir = t * row_tile;
        const int64_t mr = std::min(row_tile, o.m - ir);
        const int64_t lo = next_len * t / n_row_tiles;
        const int pf_rows =
            static_cast<int>(next_len * (t + 1) / n_row_tiles - lo);
        table[mr - 1](a + ir * o.lda + p0, o.lda, b + p0 * o.ldb + jr, o.ldb,
                      len, nr, block + ir * pitch + jr, pitch, p0 > 0,
                      pf_rows > 0 ? b + next + lo * o.ldb : nullptr, pf_rows);
      }
    }
  }
}

// acc[0:n] += sum over p < len of a[p] * b[p][0:n] (b row-major, ldb
// apart), four rows of b per sweep of acc; acc is padded to whole vectors.
template <typename E>
POLYOPS_TARGET_AVX2 void StreamRows(const E* a, const E* b, int64_t ldb,
                                    int64_t len, int64_t n, float* acc) {
  constexpr int kRows = 4;
  int64_t p = 0;
  for (; p + kRows <= len; p += kRows) {
    __m256 av[kRows];
    for (int r = 0; r < kRows; ++r) av[r] = Broadcast(a + p + r);
    const E* row = b + p * ldb;
    // Fetch the next sweep's rows, a line of each per line of this one: the
    // hardware prefetchers fall behind on four streams a row apart (bfloat16
    // 1x4096x4096 on AVX-512 without BF16, 2 threads: 0.80-0.85x torch
    // without this, 1.07-1.09x with it; docs/perf/cpu_gemm.md).
    const E* ahead = p + 2 * kRows <= len ? row + kRows * ldb : nullptr;
    for (int64_t j = 0; j < n; j += 8) {
      const int lanes = static_cast<int>(std::min<int64_t>(8, n - j));
      if (ahead && j % (64 / int64_t{sizeof(E)}) == 0) {
        for (int r = 0; r < kRows; ++r) {
          _mm_prefetch(reinterpret_cast<const char*>(ahead + r * ldb + j),
                       _MM_HINT_T0);
        }
      }
      __m256 v = _mm256_loadu_ps(acc + j);
      for (int r = 0; r < kRows; ++r) {
        v = _mm256_fmadd_ps(av[r], LoadRow(row + r * ldb + j, lanes), v);
      }
      _mm256_storeu_ps(acc + j, v);
    }
  }
  for (; p < len; ++p) {
    const __m256 av = Broadcast(a + p);
    for (int64_t j = 0; j < n; j += 8) {
      const int lanes = static_cast<int>(std::min<int64_t>(8, n - j));
      _mm256_storeu_ps(acc + j,
                       _mm256_fmadd_ps(av, LoadRow(b + p * ldb + j, lanes),
                                       _mm256_loadu_ps(acc + j)));
    }
  }
}

// One row of a times a row-major b (x @ w, m = 1). The column blocks of
// RunDecode read each row of b in runs of one block's width, a whole row
// apart, which the prefetchers follow poorly (bfloat16 4096 x 4096 on 2
// threads: 19.8 GB/s against torch's 37.8 on AVX-512 without BF16). Here
// a task takes whole rows of b, one contiguous run of memory, and sums them
// in float32 into its own partial row; the partials are then added in task
// order. The rows per task depend on k only, so each sum's order is fixed
// by the shape.
template <typename T, typename E>
void RunRowStream(const Oriented<E>& o, const GemmMatrix& out_m,
                  const GemmMatrix& c_m, float alpha, float beta, const T* c,
                  T* out) {
  // At most 16 tasks per matrix, of whole multiples of 16 rows.
  const int64_t rows = RoundUp((o.k + 15) / 16, 16);
  const int64_t chunks = (o.k + rows - 1) / rows;
  const int64_t n_pad = RoundUp(o.n, 8);
  const int64_t tasks = o.batch * chunks;
  std::vector<float> partial(static_cast<size_t>(tasks * n_pad), 0.0f);
  const auto task = [&](int64_t t) {
    const int64_t bi = t / chunks;
    const int64_t p0 = t % chunks * rows;
    StreamRows(o.a + bi * o.a_batch + p0, o.b + bi * o.b_batch + p0 * o.ldb,
               o.ldb, std::min(rows, o.k - p0), o.n,
               partial.data() + t * n_pad);
  };
  const double work = static_cast<double>(o.batch) * o.n * o.k;
  if (work >= kParallelGemmWork && tasks > 1 && omp_get_max_threads() > 1) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t) task(t);
  } else {
    for (int64_t t = 0; t < tasks; ++t) task(t);
  }
  for (int64_t bi = 0; bi < o.batch; ++bi) {
    float* sum = partial.data() + bi * chunks * n_pad;
    for (int64_t ch = 1; ch < chunks; ++ch) {
      const float* part = sum + ch * n_pad;
      for (int64_t j = 0; j < o.n; ++j) sum[j] += part[j];
    }
    FinishRows(sum, n_pad, 1, o.n, bi, 0, alpha, beta, c, c_m, out, out_m);
  }
}

template <typename T, typename E>
void RunDecode(const Oriented<E>& o, const GemmMatrix& out_m,
               const GemmMatrix& c_m, float alpha, float beta, const T* c,
               T* out) {
  const bool dot = o.b_col_major;
  if (!dot && o.m == 1) {
    RunRowStream<T, E>(o, out_m, c_m, alpha, beta, c, out);
    return;
  }
  const int64_t threads = std::max(1, omp_get_max_threads());
  // Column blocks over the threads, at least 8 per thread and taken
  // dynamically: the product is a pass over the weight, and a thread that
  // starts late (a busy core) leaves its blocks to the others instead of
  // holding the call (measured at m = 1 on 2 shared cores: a static split
  // in two ran 2.3x slower than one thread). The blocks split the output,
  // never k, and the pass length depends on m only, so every sum's order is
  // fixed by the shape.
  const int64_t nc = std::clamp<int64_t>(
      RoundUp((o.n + 8 * threads - 1) / (8 * threads), 64), 64, 512);
  // The row form with up to 8 rows reads 16 rows of b per pass (runs of the
  // block's width per row), more rows 128 (the tile's rows of b stay in L1
  // across its row tiles).
  const int64_t kc = std::min<int64_t>(o.k, o.m <= 8 ? 16 : 128);
  // Row tiles store whole vectors up to 64 columns past a tile's start.
  const int64_t pitch = RoundUp(nc, 64) + 64;
  const int64_t n_blocks = (o.n + nc - 1) / nc;
  const int64_t tasks = o.batch * n_blocks;
  const auto task = [&](int64_t t) {
    const int64_t bi = t / n_blocks;
    const int64_t j0 = t % n_blocks * nc;
    const int64_t cols = std::min(nc, o.n - j0);
    thread_local std::vector<float> block;
    block.resize(static_cast<size_t>(o.m * pitch));
    if (dot) {
      DotBlock(o, bi, j0, cols, block.data(), pitch);
    } else {
      AxpyBlock(o, bi, j0, cols, kc, block.data(), pitch);
    }
    FinishRows(block.data(), pitch, o.m, cols, bi, j0, alpha, beta, c, c_m, out,
               out_m);
  };
  const double work = static_cast<double>(o.batch) * o.m * o.n * o.k;
  if (work >= kParallelGemmWork && tasks > 1 && threads > 1) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t) task(t);
  } else {
    for (int64_t t = 0; t < tasks; ++t) task(t);
  }
}

}  // namespace

bool KernelGemmAvx2(const GemmLayout& l, DataType dtype, float alpha,
                    float beta, const void* a, const void* b, const void* c,
                    void* out) {
  const bool is_bf16 = dtype == DataType::kBFloat16;
  if (!HasAvx2() || (!is_bf16 && dtype != DataType::kFloat32)) return false;
  bool possible;
  const bool swap = SwapOperands(l, &possible);
  // float32 past kSmallM rows: OpenBLAS's sgemm is faster. bfloat16 there
  // runs in blocks of kSmallM rows of a, each a decode product over the
  // whole of b: sgemm would need both operands converted to float32
  // workspaces on every call, and measured slower (docs/perf/cpu_gemm.md).
  const int64_t m = swap ? l.n : l.m;
  if (!possible || (!is_bf16 && m > kSmallM)) return false;
  const bool use_c = l.has_c && beta != 0.0f;
  const auto run = [&](auto* typed_out, auto element) {
    using T = std::remove_pointer_t<decltype(typed_out)>;
    using E = decltype(element);
    GemmMatrix out_m, c_m;
    const Oriented<E> o = Orient<E>(l, swap, a, b, &out_m, &c_m);
    const T* tc = use_c ? static_cast<const T*>(c) : nullptr;
    // Equal blocks (33 rows: 17 + 16, not 32 + 1): each reads all of b.
    const int64_t blocks = (m + kSmallM - 1) / kSmallM;
    const int64_t block_rows = (m + blocks - 1) / blocks;
    for (int64_t i0 = 0; i0 < m; i0 += block_rows) {
      Oriented<E> rows = o;
      rows.m = std::min(block_rows, m - i0);
      rows.a = o.a + i0 * o.lda;
      RunDecode<T, E>(rows, out_m, c_m, alpha, beta,
                      tc == nullptr ? nullptr : tc + i0 * c_m.row_stride,
                      typed_out + i0 * out_m.row_stride);
    }
    SetLastGemmPath(is_bf16
                        ? (o.b_col_major ? "bf16-dot-avx2" : "bf16-axpy-avx2")
                        : (o.b_col_major ? "f32-dot-avx2" : "f32-axpy-avx2"));
  };
  if (is_bf16) {
    run(static_cast<BFloat16*>(out), uint16_t{});
  } else {
    run(static_cast<float*>(out), float{});
  }
  return true;
}

}  // namespace polyops::cpu
