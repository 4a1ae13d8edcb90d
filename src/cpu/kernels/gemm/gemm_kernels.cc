#include "cpu/kernels/gemm/gemm_kernels.h"

// GCC 12's _mm512_undefined_ps (inside the unpack intrinsics) reads an
// uninitialized variable on purpose and then warns about it.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#include <omp.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/dispatch.h"
#include "cpu/kernels/gemm/gemm_orient.h"
#include "cpu/kernels/rows/avx512_rows.h"
#include "cpu/runtime/convert.h"
#include "cpu/runtime/parallel.h"

// One target for every kernel here. The float32 kernels use only AVX-512F
// intrinsics (GCC emits AVX512-BF16 instructions only for its intrinsics),
// so they run on any CPU with AVX-512; the bfloat16 ones also need
// AVX512-BF16. Both are chosen at run time by CPUID (HasAvx512,
// HasAvx512Bf16 of cpu/kernels/rows/avx512_rows.h, which POLYOPS_CPU_ISA caps),
// as the other ISA variants are.
#define POLYOPS_TARGET_GEMM \
  __attribute__((           \
      target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c")))

namespace polyops::cpu {
namespace {

thread_local const char* last_path = "openblas";

// Element access for the two storage types the kernels read: bfloat16 as
// its bits (vdpbf16ps multiplies pairs of them into float32 sums) and
// float32 (FMA). kStep elements fill one 512-bit vector.
struct Bf16Traits {
  using E = uint16_t;
  using V = __m512i;
  static constexpr int kStep = 32;
  POLYOPS_TARGET_GEMM static POLYOPS_INLINE V Load(const E* p) {
    return _mm512_loadu_si512(p);
  }
  POLYOPS_TARGET_GEMM static POLYOPS_INLINE V LoadFirst(const E* p, int n) {
    return _mm512_maskz_loadu_epi16(static_cast<__mmask32>((1ull << n) - 1), p);
  }
  // acc[l] += a[2l] * b[2l] + a[2l + 1] * b[2l + 1], exact products
  // summed in float32.
  POLYOPS_TARGET_GEMM static POLYOPS_INLINE __m512 Madd(__m512 acc, V a, V b) {
    return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
  }
};

struct F32Traits {
  using E = float;
  using V = __m512;
  static constexpr int kStep = 16;
  POLYOPS_TARGET_GEMM static POLYOPS_INLINE V Load(const E* p) {
    return _mm512_loadu_ps(p);
  }
  POLYOPS_TARGET_GEMM static POLYOPS_INLINE V LoadFirst(const E* p, int n) {
    return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), p);
  }
  POLYOPS_TARGET_GEMM static POLYOPS_INLINE __m512 Madd(__m512 acc, V a, V b) {
    return _mm512_fmadd_ps(a, b, acc);
  }
};

// The 16 lane-wise partial sums v[q] (q = i * kDotCols + j) reduced to one
// vector whose element q is the sum of v[q]'s lanes: a transpose-and-add tree,
// 45 instructions instead of 16 separate reductions, in a fixed order.
POLYOPS_TARGET_GEMM POLYOPS_INLINE __m512 Reduce16(const __m512 (&v)[16]) {
  __m512 s1[8];
  for (int q = 0; q < 8; ++q) {
    s1[q] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * q], v[2 * q + 1]),
                          _mm512_unpackhi_ps(v[2 * q], v[2 * q + 1]));
  }
  __m512 s2[4];
  for (int q = 0; q < 4; ++q) {
    const __m512d x = _mm512_castps_pd(s1[2 * q]);
    const __m512d y = _mm512_castps_pd(s1[2 * q + 1]);
    s2[q] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
                          _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
  }
  __m512 s3[2];
  for (int q = 0; q < 2; ++q) {
    s3[q] = _mm512_add_ps(_mm512_shuffle_f32x4(s2[2 * q], s2[2 * q + 1], 0x88),
                          _mm512_shuffle_f32x4(s2[2 * q], s2[2 * q + 1], 0xdd));
  }
  return _mm512_add_ps(_mm512_shuffle_f32x4(s3[0], s3[1], 0x88),
                       _mm512_shuffle_f32x4(s3[0], s3[1], 0xdd));
}

// Dot tiles are up to kDotRows x kDotCols (16 accumulators, 8 loads per 16
// vdpbf16ps): the tile's columns of b stay in L1 while rows of a stream
// past them from L2. (2 x 8, half the L2 traffic, measured ~6% slower at
// 1024^3 on Zen 4.)
constexpr int kDotRows = 4;
constexpr int kDotCols = 4;

// dst[i][j] (+)= sum over p < kc of a[i][p] * b[j][p] for i < MR, j < NR:
// rows of a and columns of b both contiguous in k (a row-major times a
// column-major b, e.g. x @ weight.T), each element a dot product: no
// operand is repacked, which at decode sizes (m = 1..32) leaves one pass
// over the weight.
template <typename Tr, int MR, int NR>
POLYOPS_TARGET_GEMM void DotTile(const typename Tr::E* a, int64_t lda,
                                 const typename Tr::E* b, int64_t ldb,
                                 int64_t kc, float* dst, int64_t ld_dst,
                                 bool accumulate) {
  __m512 acc[16];
  for (int q = 0; q < 16; ++q) acc[q] = _mm512_setzero_ps();
  int64_t p = 0;
  for (; p + Tr::kStep <= kc; p += Tr::kStep) {
    typename Tr::V bv[NR];
    for (int j = 0; j < NR; ++j) bv[j] = Tr::Load(b + j * ldb + p);
    for (int i = 0; i < MR; ++i) {
      const typename Tr::V av = Tr::Load(a + i * lda + p);
      for (int j = 0; j < NR; ++j) {
        acc[i * kDotCols + j] = Tr::Madd(acc[i * kDotCols + j], av, bv[j]);
      }
    }
  }
  if (p < kc) {
    const int rest = static_cast<int>(kc - p);
    typename Tr::V bv[NR];
    for (int j = 0; j < NR; ++j) bv[j] = Tr::LoadFirst(b + j * ldb + p, rest);
    for (int i = 0; i < MR; ++i) {
      const typename Tr::V av = Tr::LoadFirst(a + i * lda + p, rest);
      for (int j = 0; j < NR; ++j) {
        acc[i * kDotCols + j] = Tr::Madd(acc[i * kDotCols + j], av, bv[j]);
      }
    }
  }
  alignas(64) float sums[16];
  _mm512_store_ps(sums, Reduce16(acc));
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) {
      float& d = dst[i * ld_dst + j];
      d = accumulate ? d + sums[i * kDotCols + j] : sums[i * kDotCols + j];
    }
  }
}

// Masks of the valid lanes of 16-wide vectors covering `cols` columns.
template <int NV>
POLYOPS_INLINE std::array<__mmask16, NV> ColumnMasks(int cols) {
  std::array<__mmask16, NV> masks{};
  for (int v = 0; v < NV; ++v) {
    const int valid = std::clamp(cols - 16 * v, 0, 16);
    masks[v] = static_cast<__mmask16>((1u << valid) - 1);
  }
  return masks;
}

// acc rows (16 * NV float columns each) into dst rows, added when
// `accumulate`. dst rows are padded to whole tiles (pitch: see RunBlocked).
template <int MR, int NV>
POLYOPS_TARGET_GEMM POLYOPS_INLINE void StoreTile(const __m512 (&acc)[MR][NV],
                                                  float* dst, int64_t ld_dst,
                                                  bool accumulate) {
  for (int i = 0; i < MR; ++i) {
    for (int v = 0; v < NV; ++v) {
      float* d = dst + i * ld_dst + 16 * v;
      __m512 value = acc[i][v];
      if (accumulate) value = _mm512_add_ps(value, _mm512_loadu_ps(d));
      _mm512_storeu_ps(d, value);
    }
  }
}

// Up to 16 values of a T row (element stride `stride`) as float32; lanes
// past `mask` are zero.
template <typename T>
POLYOPS_TARGET_GEMM POLYOPS_INLINE __m512 LoadLanes(const T* src,
                                                    int64_t stride,
                                                    __mmask16 mask, int n) {
  if (stride == 1) {
    if constexpr (std::is_same_v<T, float>) {
      return _mm512_maskz_loadu_ps(mask, src);
    } else {
      const __m256i bits = _mm256_maskz_loadu_epi16(mask, src);
      return _mm512_castsi512_ps(
          _mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
    }
  }
  if (stride == 0) return _mm512_maskz_mov_ps(mask, _mm512_set1_ps(Load(src)));
  alignas(64) float values[16] = {};
  for (int t = 0; t < n; ++t) values[t] = Load(src + t * stride);
  return _mm512_load_ps(values);
}

// The first n lanes of v stored into a T row (element stride `stride`),
// rounded as Store rounds (bfloat16: to nearest even, NaN kept quiet).
template <typename T>
POLYOPS_TARGET_GEMM POLYOPS_INLINE void StoreLanes(__m512 v, T* dst,
                                                   int64_t stride,
                                                   __mmask16 mask, int n) {
  if (stride == 1) {
    if constexpr (std::is_same_v<T, float>) {
      _mm512_mask_storeu_ps(dst, mask, v);
    } else {
      const __m512i bits = _mm512_castps_si512(v);
      const __m512i one = _mm512_set1_epi32(1);
      const __m512i rounded =
          _mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)),
                           _mm512_and_si512(_mm512_srli_epi32(bits, 16), one));
      const __mmask16 nan = _mm512_cmpgt_epu32_mask(
          _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)),
          _mm512_set1_epi32(0x7f800000));
      const __m512i quiet = _mm512_or_si512(bits, _mm512_set1_epi32(0x400000));
      const __m512i chosen = _mm512_mask_mov_epi32(rounded, nan, quiet);
      _mm256_mask_storeu_epi16(
          dst, mask, _mm512_cvtepi32_epi16(_mm512_srli_epi32(chosen, 16)));
    }
    return;
  }
  alignas(64) float values[16];
  _mm512_store_ps(values, v);
  for (int t = 0; t < n; ++t) Store(dst + t * stride, values[t]);
}

// out[0:n] = alpha * sums[0:n] (+ beta * c[0:n] when c is given), rounded
// once to T; c and out have element strides (c's may be 0: a bias).
template <typename T>
POLYOPS_TARGET_GEMM void FinishRow(const float* sums, int64_t n, float alpha,
                                   float beta, const T* c, int64_t c_stride,
                                   T* out, int64_t out_stride) {
  const __m512 alpha_v = _mm512_set1_ps(alpha);
  const __m512 beta_v = _mm512_set1_ps(beta);
  for (int64_t j = 0; j < n; j += 16) {
    const int lanes = static_cast<int>(std::min<int64_t>(16, n - j));
    const __mmask16 mask = static_cast<__mmask16>((1u << lanes) - 1);
    __m512 v = _mm512_maskz_loadu_ps(mask, sums + j);
    if (alpha != 1.0f) v = _mm512_mul_ps(v, alpha_v);
    if (c != nullptr) {
      const __m512 cv = LoadLanes(c + j * c_stride, c_stride, mask, lanes);
      v = _mm512_add_ps(v, _mm512_mul_ps(beta_v, cv));
    }
    StoreLanes(v, out + j * out_stride, out_stride, mask, lanes);
  }
}

// The bfloat16 product with a row-major b ([k, n], rows contiguous in n):
// dst[i][0:16 * NV] (+)= sum over pairs p of a[i][2p:2p+2] . b[2p:2p+2][:].
// Two rows of b are interleaved into (b[2p][j], b[2p + 1][j]) pairs in
// registers, the layout vdpbf16ps multiplies, so b is read in place; a's
// pair is one 32-bit broadcast. `cols` <= 16 * NV columns are valid; a
// full tile loads without masks (AVX-512 has 7 mask registers, and a mask
// per load spills).
// VPERMT2W indices that interleave two rows x, y of 32 bfloat16 into the
// pairs vdpbf16ps reads: element 2t of the low result is x[t], 2t + 1 is
// y[t]; the high result does the same for t + 16.
alignas(64) constexpr uint16_t kInterleaveLo[32] = {
    0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
    8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
alignas(64) constexpr uint16_t kInterleaveHi[32] = {
    16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
    24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};

template <int MR, int NV, bool kFull>
POLYOPS_TARGET_GEMM POLYOPS_INLINE void PairTileBody(
    const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, int64_t kc,
    int cols, float* dst, int64_t ld_dst, bool accumulate) {
  static_assert(NV % 2 == 0, "whole 32-column loads");
  constexpr int kChunks = NV / 2;
  const __m512i idx_lo = _mm512_load_si512(kInterleaveLo);
  const __m512i idx_hi = _mm512_load_si512(kInterleaveHi);
  const auto mask = [&](int c) {
    const int valid = std::clamp(cols - 32 * c, 0, 32);
    return static_cast<__mmask32>((1ull << valid) - 1);
  };
  const auto load = [&](const uint16_t* row, int c) POLYOPS_TARGET_GEMM {
    if constexpr (kFull) {
      return _mm512_loadu_si512(row + 32 * c);
    } else {
      return _mm512_maskz_loadu_epi16(mask(c), row + 32 * c);
    }
  };
  __m512 acc[MR][NV];
  for (int i = 0; i < MR; ++i) {
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
  }
  const auto step = [&](const uint16_t* r0, const uint16_t* r1, int64_t p,
                        bool odd) POLYOPS_TARGET_GEMM {
    __m512bh av[MR];
    for (int i = 0; i < MR; ++i) {
      uint32_t pair = 0;
      std::memcpy(&pair, a + i * lda + p, odd ? 2 : 4);
      av[i] = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair));
    }
    for (int c = 0; c < kChunks; ++c) {
      const __m512i x = load(r0, c);
      const __m512i y = odd ? _mm512_setzero_si512() : load(r1, c);
      const __m512bh lo = (__m512bh)_mm512_permutex2var_epi16(x, idx_lo, y);
      const __m512bh hi = (__m512bh)_mm512_permutex2var_epi16(x, idx_hi, y);
      for (int i = 0; i < MR; ++i) {
        acc[i][2 * c] = _mm512_dpbf16_ps(acc[i][2 * c], av[i], lo);
        acc[i][2 * c + 1] = _mm512_dpbf16_ps(acc[i][2 * c + 1], av[i], hi);
      }
    }
  };
  int64_t p = 0;
  for (; p + 2 <= kc; p += 2) step(b + p * ldb, b + (p + 1) * ldb, p, false);
  if (p < kc) step(b + p * ldb, nullptr, p, true);
  StoreTile<MR, NV>(acc, dst, ld_dst, accumulate);
}

template <int MR, int NV>
POLYOPS_TARGET_GEMM void PairTile(const uint16_t* a, int64_t lda,
                                  const uint16_t* b, int64_t ldb, int64_t kc,
                                  int cols, float* dst, int64_t ld_dst,
                                  bool accumulate) {
  if (cols == 16 * NV) {
    PairTileBody<MR, NV, true>(a, lda, b, ldb, kc, cols, dst, ld_dst,
                               accumulate);
  } else {
    PairTileBody<MR, NV, false>(a, lda, b, ldb, kc, cols, dst, ld_dst,
                                accumulate);
  }
}

// The float32 product with a row-major b: dst[i][:] (+)= sum over p of
// a[i][p] * b[p][:], b's rows read in place; full tiles without masks.
template <int MR, int NV, bool kFull>
POLYOPS_TARGET_GEMM POLYOPS_INLINE void AxpyTileBody(
    const float* a, int64_t lda, const float* b, int64_t ldb, int64_t kc,
    int cols, float* dst, int64_t ld_dst, bool accumulate) {
  const std::array<__mmask16, NV> masks = ColumnMasks<NV>(cols);
  __m512 acc[MR][NV];
  for (int i = 0; i < MR; ++i) {
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < kc; ++p) {
    __m512 av[MR];
    for (int i = 0; i < MR; ++i) av[i] = _mm512_set1_ps(a[i * lda + p]);
    for (int v = 0; v < NV; ++v) {
      const float* src = b + p * ldb + 16 * v;
      __m512 bv;
      if constexpr (kFull) {
        bv = _mm512_loadu_ps(src);
      } else {
        bv = _mm512_maskz_loadu_ps(masks[v], src);
      }
      for (int i = 0; i < MR; ++i) {
        acc[i][v] = _mm512_fmadd_ps(av[i], bv, acc[i][v]);
      }
    }
  }
  StoreTile<MR, NV>(acc, dst, ld_dst, accumulate);
}

template <int MR, int NV>
POLYOPS_TARGET_GEMM void AxpyTile(const float* a, int64_t lda, const float* b,
                                  int64_t ldb, int64_t kc, int cols, float* dst,
                                  int64_t ld_dst, bool accumulate) {
  if (cols == 16 * NV) {
    AxpyTileBody<MR, NV, true>(a, lda, b, ldb, kc, cols, dst, ld_dst,
                               accumulate);
  } else {
    AxpyTileBody<MR, NV, false>(a, lda, b, ldb, kc, cols, dst, ld_dst,
                                accumulate);
  }
}

// Tile function tables indexed by the tile's row (and column) count.
template <typename E>
using DotFn = void (*)(const E*, int64_t, const E*, int64_t, int64_t, float*,
                       int64_t, bool);
template <typename E>
using RowFn = void (*)(const E*, int64_t, const E*, int64_t, int64_t, int,
                       float*, int64_t, bool);

template <typename Tr, int... I>
constexpr std::array<DotFn<typename Tr::E>, 16> MakeDotTable(
    std::integer_sequence<int, I...>) {
  return {&DotTile<Tr, I / kDotCols + 1, I % kDotCols + 1>...};
}

template <typename E, int NV, int... I>
constexpr std::array<RowFn<E>, sizeof...(I)> MakeRowTable(
    std::integer_sequence<int, I...>) {
  if constexpr (std::is_same_v<E, float>) {
    return {&AxpyTile<I + 1, NV>...};
  } else {
    return {&PairTile<I + 1, NV>...};
  }
}

// Rows x columns of the output a task computes, and the k slice per pass.
struct Blocking {
  int64_t mc, nc, kc;
};

// Blocking of a decode product (m <= kSmallM). `dot`: b is column-major.
// The weight streams from memory once; its column blocks are split over the
// threads (at least 4 blocks per thread to balance). The dot form reads
// whole columns of b (rows of the weight), so k is not split and the sums
// stay in registers. The row form reads rows of b: k passes of 128 rows
// sweep the whole column block, so memory is read in runs of nc elements
// rather than one tile's width.
Blocking ChooseBlocking(int64_t m, int64_t n, int64_t k, bool dot) {
  const int64_t threads = std::max(1, omp_get_max_threads());
  Blocking blocking;
  blocking.mc = m;
  blocking.nc = std::clamp<int64_t>(
      RoundUp((n + 4 * threads - 1) / (4 * threads), 64), 64, 512);
  blocking.kc = dot ? k : std::min<int64_t>(k, 128);
  if (!dot && m <= 8) {
    // A few rows of a: the product is one pass over b, best read in long
    // runs. Each thread takes one wide column range, and passes of a few
    // rows of b sweep it tile by tile, so the prefetchers see a few long
    // streams (one per row of b) instead of a tile's width per row.
    blocking.nc = RoundUp((n + threads - 1) / threads, 256);
    blocking.kc = std::min<int64_t>(k, m <= 4 ? 4 : 16);
  }
  return blocking;
}

// Everything one output block needs: the oriented operands, out and c, the
// scaling and the blocking.
template <typename T, typename E>
struct BlockJob {
  const Oriented<E>& o;
  const GemmMatrix& out_m;
  const GemmMatrix& c_m;
  float alpha, beta;
  const T* c;
  T* out;
  Blocking blk;
  int64_t pitch;
};

// out[i0:i0+rows, j0:j0+cols] of matrix bi: summed over k in kc passes into
// a float32 block, then scaled, given its beta * c term and rounded once.
// b (leading dim ldb) is the matrix's b, read in place; the block's
// columns start at its column b_col0.
template <typename T, typename E>
void ComputeBlock(const BlockJob<T, E>& job, int64_t bi, int64_t i0, int64_t j0,
                  int64_t rows, int64_t cols, const E* b, int64_t ldb, bool dot,
                  int64_t b_col0) {
  using Tr =
      std::conditional_t<std::is_same_v<E, float>, F32Traits, Bf16Traits>;
  static constexpr auto kDotTable =
      MakeDotTable<Tr>(std::make_integer_sequence<int, 16>());
  static constexpr auto kTall =
      MakeRowTable<E, 2>(std::make_integer_sequence<int, 8>());
  static constexpr auto kWide =
      MakeRowTable<E, 4>(std::make_integer_sequence<int, 4>());
  static constexpr auto kWider =
      MakeRowTable<E, 8>(std::make_integer_sequence<int, 2>());
  static constexpr auto kWidest =
      MakeRowTable<E, 16>(std::make_integer_sequence<int, 1>());
  const Oriented<E>& o = job.o;
  const int64_t pitch = job.pitch;
  // Few rows: wider tiles (up to 256 columns, 16 accumulators), so a k
  // pass reads long runs of each row of b.
  const RowFn<E>* table = o.m == 1   ? kWidest.data()
                          : o.m == 2 ? kWider.data()
                          : o.m <= 4 ? kWide.data()
                                     : kTall.data();
  const int64_t row_tile = dot ? kDotRows : (o.m <= 4 ? o.m : 8);
  const int64_t col_tile = dot        ? kDotCols
                           : o.m == 1 ? 256
                           : o.m == 2 ? 128
                           : o.m <= 4 ? 64
                                      : 32;
  thread_local std::vector<float> block;
  block.resize(static_cast<size_t>(job.blk.mc * pitch));
  const E* a = o.a + bi * o.a_batch + i0 * o.lda;
  for (int64_t p0 = 0; p0 < o.k; p0 += job.blk.kc) {
    const int64_t kc = std::min(job.blk.kc, o.k - p0);
    const bool accumulate = p0 > 0;
    for (int64_t jr = 0; jr < cols; jr += col_tile) {
      const int64_t nr = std::min(col_tile, cols - jr);
      for (int64_t ir = 0; ir < rows; ir += row_tile) {
        const int64_t mr = std::min(row_tile, rows - ir);
        float* dst = block.data() + ir * pitch + jr;
        const E* ap = a + ir * o.lda + p0;
        if (dot) {
          kDotTable[(mr - 1) * kDotCols + (nr - 1)](
              ap, o.lda, b + (b_col0 + jr) * ldb + p0, ldb, kc, dst, pitch,
              accumulate);
        } else {
          table[mr - 1](ap, o.lda, b + p0 * ldb + b_col0 + jr, ldb, kc,
                        static_cast<int>(nr), dst, pitch, accumulate);
        }
      }
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = i0 + r;
    FinishRow(block.data() + r * pitch, cols, job.alpha, job.beta,
              job.c == nullptr
                  ? nullptr
                  : job.c + bi * job.c_m.batch_stride + i * job.c_m.row_stride +
                        j0 * job.c_m.col_stride,
              job.c_m.col_stride,
              job.out + bi * job.out_m.batch_stride + i * job.out_m.row_stride +
                  j0 * job.out_m.col_stride,
              job.out_m.col_stride);
  }
}

// The product as tasks of mc x nc output blocks over the threads, b read
// in place (m <= kSmallM: decode).
template <typename T, typename E>
void RunBlocked(const Oriented<E>& o, const GemmMatrix& out_m,
                const GemmMatrix& c_m, float alpha, float beta, const T* c,
                T* out) {
  const bool dot = o.b_col_major;
  const Blocking blk = ChooseBlocking(o.m, o.n, o.k, dot);
  // Row tiles write whole vectors, up to 256 columns: the float32 block's
  // rows are padded to that.
  const BlockJob<T, E> job{
      o, out_m, c_m, alpha, beta, c, out, blk, RoundUp(blk.nc, 256)};
  const int64_t m_blocks = (o.m + blk.mc - 1) / blk.mc;
  const int64_t n_blocks = (o.n + blk.nc - 1) / blk.nc;
  const double work = static_cast<double>(o.batch) * o.m * o.n * o.k;
  ParallelFor(o.batch * n_blocks * m_blocks, work >= kParallelGemmWork,
              [&](int64_t t) {
                const int64_t ib = t % m_blocks;
                const int64_t jb = (t / m_blocks) % n_blocks;
                const int64_t bi = t / (m_blocks * n_blocks);
                const int64_t i0 = ib * blk.mc;
                const int64_t j0 = jb * blk.nc;
                ComputeBlock(job, bi, i0, j0, std::min(blk.mc, o.m - i0),
                             std::min(blk.nc, o.n - j0), o.b + bi * o.b_batch,
                             o.ldb, dot, j0);
              });
}

// ---------------------------------------------------------------------------
// The blocked product for more than kSmallM rows (both dtypes): b packed once
// per column strip into the layout the micro-kernel streams, a read in place
// (row-major: one row's k run is contiguous, and a bfloat16 pair of it is one
// 32-bit broadcast), kMr x kNr output tiles held in 24 accumulators.
//
// Packed b is made of 32-bit units: a (b[2s][j], b[2s + 1][j]) bfloat16 pair,
// the operand layout of vdpbf16ps, or one float32 b[s][j]. A panel is kNr
// columns; its step s (kUnitK values of k) is kNr consecutive units, so the
// kernel loads kPackNv vectors per step and broadcasts one unit of each row
// of a against them: kMr * kPackNv vdpbf16ps / FMA per kPackNv + kMr loads
// (the broadcasts fold into the instructions), none of them a reduction.
constexpr int kMr = 12;
constexpr int kPackNv = 2;
constexpr int64_t kNr = 16 * kPackNv;
// Most steps of k per pass. A tile's sums stay in registers for a whole
// pass, so k is split only when it is long: each pass ends in a round trip
// of the 24 accumulators through the float32 block, which at 128 steps per
// pass (a panel's pass in L1) cost ~7 % of the time at 1024^3. A pass of
// 2048 steps reads its panel (up to 256 KiB) from L2, which keeps up: one
// 128-byte step per kMr * kPackNv instructions.
constexpr int64_t kMaxStepsPerPass = 2048;
// Columns per strip (one task; its packed b, all of k, stays in L2/L3) and
// rows per block (the float32 sums of a block, kMcMax x kNc, stay in L2).
constexpr int64_t kNc = 256;
constexpr int64_t kMcMax = 192;

template <typename E>
inline constexpr int64_t kUnitK = std::is_same_v<E, float> ? 1 : 2;

// dst tile (MR x kNr float32, rows ld_dst apart) (+)= a[0:MR, 0:steps *
// kUnitK] @ packed panel; for bfloat16, `half` adds one more k (the odd
// last one: its unit's second value is zero in b and not read from a).
template <typename E, int MR>
POLYOPS_TARGET_GEMM void PackedTile(const E* a, int64_t lda, const uint32_t* b,
                                    int64_t steps, bool half, float* dst,
                                    int64_t ld_dst, bool accumulate) {
  __m512 acc[MR][kPackNv];
  for (int i = 0; i < MR; ++i) {
    for (int v = 0; v < kPackNv; ++v) acc[i][v] = _mm512_setzero_ps();
  }
  const auto step = [&](int64_t s, int bytes) POLYOPS_TARGET_GEMM {
    const uint32_t* bs = b + s * kNr;
    if constexpr (std::is_same_v<E, float>) {
      __m512 bv[kPackNv];
      for (int v = 0; v < kPackNv; ++v) bv[v] = _mm512_loadu_ps(bs + 16 * v);
      for (int i = 0; i < MR; ++i) {
        const __m512 av = _mm512_set1_ps(a[i * lda + s]);
        for (int v = 0; v < kPackNv; ++v) {
          acc[i][v] = _mm512_fmadd_ps(av, bv[v], acc[i][v]);
        }
      }
    } else {
      __m512bh bv[kPackNv];
      for (int v = 0; v < kPackNv; ++v) {
        bv[v] = (__m512bh)_mm512_loadu_si512(bs + 16 * v);
      }
      for (int i = 0; i < MR; ++i) {
        uint32_t pair = 0;
        std::memcpy(&pair, a + i * lda + 2 * s, bytes);
        const __m512bh av = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair));
        for (int v = 0; v < kPackNv; ++v) {
          acc[i][v] = _mm512_dpbf16_ps(acc[i][v], av, bv[v]);
        }
      }
    }
  };
  for (int64_t s = 0; s < steps; ++s) step(s, 4);
  if constexpr (!std::is_same_v<E, float>) {
    if (half) step(steps, 2);
  }
  StoreTile<MR, kPackNv>(acc, dst, ld_dst, accumulate);
}

template <typename E>
using PackedFn = void (*)(const E*, int64_t, const uint32_t*, int64_t, bool,
                          float*, int64_t, bool);

template <typename E, int... I>
constexpr std::array<PackedFn<E>, sizeof...(I)> MakePackedTable(
    std::integer_sequence<int, I...>) {
  return {&PackedTile<E, I + 1>...};
}

// Columns [j0, j0 + cols) of matrix bi of b, all of k, packed as panels
// (see above); columns past `cols` and the second value of an odd last k
// are zero.
template <typename E>
POLYOPS_TARGET_GEMM void PackStrip(const Oriented<E>& o, int64_t bi, int64_t j0,
                                   int64_t cols, int64_t steps, uint32_t* dst) {
  constexpr int64_t kK = kUnitK<E>;
  const E* b = o.b + bi * o.b_batch;
  const int64_t full_steps = o.k / kK;  // steps with every k present
  for (int64_t c0 = 0; c0 < cols; c0 += kNr) {
    const int64_t valid = std::min(kNr, cols - c0);
    uint32_t* panel = dst + c0 / kNr * steps * kNr;
    if (o.b_col_major) {
      // Column j's units are contiguous (k runs along the column): a
      // transpose, one 16-column gather per vector (scale: element bytes;
      // the index j * ldb fits 32 bits, see KernelGemm).
      for (int v = 0; v < kPackNv; ++v) {
        const int lanes =
            static_cast<int>(std::clamp<int64_t>(valid - 16 * v, 0, 16));
        const __mmask16 mask = static_cast<__mmask16>((1u << lanes) - 1);
        const __m512i idx =
            _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7,
                                                6, 5, 4, 3, 2, 1, 0),
                               _mm512_set1_epi32(static_cast<int>(o.ldb)));
        const E* col = b + (j0 + c0 + 16 * v) * o.ldb;
        for (int64_t s = 0; s < full_steps; ++s) {
          __m512i units = _mm512_setzero_si512();
          if (lanes > 0) {
            units = _mm512_mask_i32gather_epi32(units, mask, idx, col + kK * s,
                                                sizeof(E));
          }
          _mm512_storeu_si512(panel + s * kNr + 16 * v, units);
        }
        if (full_steps < steps) {
          for (int j = 0; j < 16; ++j) {
            uint16_t last = 0;
            if (j < lanes) std::memcpy(&last, col + j * o.ldb + o.k - 1, 2);
            panel[full_steps * kNr + 16 * v + j] = last;
          }
        }
      }
      continue;
    }
    // Row-major b: rows of the strip are contiguous.
    for (int64_t s = 0; s < steps; ++s) {
      if constexpr (std::is_same_v<E, float>) {
        for (int v = 0; v < kPackNv; ++v) {
          const int lanes =
              static_cast<int>(std::clamp<int64_t>(valid - 16 * v, 0, 16));
          const __m512 x =
              _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << lanes) - 1),
                                    b + s * o.ldb + j0 + c0 + 16 * v);
          _mm512_storeu_ps(panel + s * kNr + 16 * v, x);
        }
      } else {
        // Two rows interleaved into pairs.
        const __m512i idx_lo = _mm512_load_si512(kInterleaveLo);
        const __m512i idx_hi = _mm512_load_si512(kInterleaveHi);
        for (int ch = 0; ch < kPackNv / 2; ++ch) {
          const int lanes =
              static_cast<int>(std::clamp<int64_t>(valid - 32 * ch, 0, 32));
          const __mmask32 mask = static_cast<__mmask32>((1ull << lanes) - 1);
          const E* row = b + 2 * s * o.ldb + j0 + c0 + 32 * ch;
          const __m512i x = _mm512_maskz_loadu_epi16(mask, row);
          const __m512i y = 2 * s + 1 < o.k
                                ? _mm512_maskz_loadu_epi16(mask, row + o.ldb)
                                : _mm512_setzero_si512();
          _mm512_storeu_si512(panel + s * kNr + 32 * ch,
                              _mm512_permutex2var_epi16(x, idx_lo, y));
          _mm512_storeu_si512(panel + s * kNr + 32 * ch + 16,
                              _mm512_permutex2var_epi16(x, idx_hi, y));
        }
      }
    }
  }
}

template <typename T, typename E>
void RunPacked(const Oriented<E>& o, const GemmMatrix& out_m,
               const GemmMatrix& c_m, float alpha, float beta, const T* c,
               T* out) {
  static_assert(kPackNv % 2 == 0, "bfloat16 packs 32 columns per load");
  static constexpr auto kTable =
      MakePackedTable<E>(std::make_integer_sequence<int, kMr>());
  constexpr int64_t kK = kUnitK<E>;
  const int64_t steps = (o.k + kK - 1) / kK;
  // Passes of equal length (the last may hold the odd k of bfloat16).
  const int64_t passes = (steps + kMaxStepsPerPass - 1) / kMaxStepsPerPass;
  const int64_t pass_steps = (steps + passes - 1) / passes;
  const int64_t n_blocks = (o.n + kNc - 1) / kNc;
  // Row blocks of equal size (whole tiles), at most kMcMax rows.
  const int64_t m_blocks = (o.m + kMcMax - 1) / kMcMax;
  const int64_t mc = RoundUp((o.m + m_blocks - 1) / m_blocks, kMr);
  const double work = static_cast<double>(o.batch) * o.m * o.n * o.k;
  ParallelFor(o.batch * n_blocks, work >= kParallelGemmWork, [&](int64_t t) {
    const int64_t bi = t / n_blocks;
    const int64_t j0 = t % n_blocks * kNc;
    const int64_t cols = std::min(kNc, o.n - j0);
    const int64_t panels = (cols + kNr - 1) / kNr;
    thread_local std::vector<uint32_t> packed;
    packed.resize(static_cast<size_t>(panels * steps * kNr));
    PackStrip(o, bi, j0, cols, steps, packed.data());
    const int64_t pitch = panels * kNr;
    thread_local std::vector<float> block;
    block.resize(static_cast<size_t>(mc * pitch));
    const T* c_mat = c == nullptr ? nullptr : c + bi * c_m.batch_stride;
    T* out_mat = out + bi * out_m.batch_stride;
    for (int64_t i0 = 0; i0 < o.m; i0 += mc) {
      const int64_t rows = std::min(mc, o.m - i0);
      const E* a = o.a + bi * o.a_batch + i0 * o.lda;
      for (int64_t s0 = 0; s0 < steps; s0 += pass_steps) {
        const int64_t pass_k = std::min(pass_steps * kK, o.k - s0 * kK);
        const bool last = s0 + pass_steps >= steps;
        for (int64_t pj = 0; pj < panels; ++pj) {
          const uint32_t* bp = packed.data() + (pj * steps + s0) * kNr;
          for (int64_t ir = 0; ir < rows; ir += kMr) {
            const int64_t mr = std::min<int64_t>(kMr, rows - ir);
            float* dst = block.data() + ir * pitch + pj * kNr;
            kTable[mr - 1](a + ir * o.lda + s0 * kK, o.lda, bp, pass_k / kK,
                           pass_k % kK != 0, dst, pitch, s0 > 0);
            if (!last) continue;
            // The tile's final sums, still in L1: scaled, given beta * c
            // and rounded into out.
            const int64_t j = j0 + pj * kNr;
            const int64_t width = std::min(kNr, o.n - j);
            for (int64_t r = 0; r < mr; ++r) {
              const int64_t i = i0 + ir + r;
              FinishRow(dst + r * pitch, width, alpha, beta,
                        c_mat == nullptr
                            ? nullptr
                            : c_mat + i * c_m.row_stride + j * c_m.col_stride,
                        c_m.col_stride,
                        out_mat + i * out_m.row_stride + j * out_m.col_stride,
                        out_m.col_stride);
            }
          }
        }
      }
    }
  });
}

}  // namespace

const char* LastGemmPath() { return last_path; }
void SetLastGemmPath(const char* path) { last_path = path; }

bool KernelGemm(const GemmLayout& l, DataType dtype, float alpha, float beta,
                const void* a, const void* b, const void* c, void* out) {
  const bool is_bf16 = dtype == DataType::kBFloat16;
  if (is_bf16 ? !HasAvx512Bf16()
              : dtype != DataType::kFloat32 || !HasAvx512()) {
    // Without these kernels, the AVX2 kernels (gemm_kernels_avx2.cc).
    return KernelGemmAvx2(l, dtype, alpha, beta, a, b, c, out);
  }
  bool possible;
  const bool swap =
      SwapOperands(l, &possible);  // cpu/kernels/gemm/gemm_orient.h
  if (!possible) return false;
  const int64_t m = swap ? l.n : l.m;
  // The packed path gathers columns of a column-major b with 32-bit
  // indices (j * ldb, j < kNr); OpenBLAS takes larger leading dims.
  const int64_t b_ld = swap ? l.a_blas.ld : l.b_blas.ld;
  if (m > kSmallM && b_ld > INT32_MAX / kNr) return false;
  const bool use_c = l.has_c && beta != 0.0f;
  const auto run = [&](auto tag, auto element) {
    using T = typename decltype(tag)::type;
    using E = decltype(element);
    GemmMatrix out_m, c_m;
    const Oriented<E> o = Orient<E>(l, swap, a, b, &out_m, &c_m);
    const T* tc = use_c ? static_cast<const T*>(c) : nullptr;
    T* tout = static_cast<T*>(out);
    const bool packed = o.m > kSmallM;
    if (packed) {
      RunPacked<T, E>(o, out_m, c_m, alpha, beta, tc, tout);
    } else {
      RunBlocked<T, E>(o, out_m, c_m, alpha, beta, tc, tout);
    }
    last_path = is_bf16 ? (packed          ? "bf16-packed"
                           : o.b_col_major ? "bf16-dot"
                                           : "bf16-pair")
                        : (packed          ? "f32-packed"
                           : o.b_col_major ? "f32-dot"
                                           : "f32-axpy");
  };
  if (is_bf16) {
    run(TypeTag<BFloat16>{}, uint16_t{});
  } else {
    run(TypeTag<float>{}, float{});
  }
  return true;
}

}  // namespace polyops::cpu
