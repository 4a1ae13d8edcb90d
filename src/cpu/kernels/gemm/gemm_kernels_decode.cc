// The AVX-512 decode products of KernelGemm (m <= kSmallM after
// orientation): b, usually the weight, is read in place, never repacked, so
// the memory-bound product is one pass over it. A column-major b runs as
// dot products (DotTile), a row-major one as broadcasts of a against rows
// of b (PairTile for bfloat16, AxpyTile for float32).
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/data_type.h"
#include "core/gemm_layout.h"
#include "cpu/kernels/gemm/gemm_kernels_avx512.h"
#include "cpu/kernels/gemm/gemm_orient.h"
#include "cpu/runtime/convert.h"
#include "cpu/runtime/parallel.h"

namespace polyops::cpu {
namespace {

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

// The bfloat16 product with a row-major b ([k, n], rows contiguous in n):
// dst[i][0:16 * NV] (+)= sum over pairs p of a[i][2p:2p+2] . b[2p:2p+2][:].
// Two rows of b are interleaved into (b[2p][j], b[2p + 1][j]) pairs in
// registers, the layout vdpbf16ps multiplies, so b is read in place; a's
// pair is one 32-bit broadcast. `cols` <= 16 * NV columns are valid; a
// full tile loads without masks (AVX-512 has 7 mask registers, and a mask
// per load spills).
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

}  // namespace

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

template void RunBlocked<BFloat16, uint16_t>(const Oriented<uint16_t>&,
                                             const GemmMatrix&,
                                             const GemmMatrix&, float, float,
                                             const BFloat16*, BFloat16*);
template void RunBlocked<float, float>(const Oriented<float>&,
                                       const GemmMatrix&, const GemmMatrix&,
                                       float, float, const float*, float*);

}  // namespace polyops::cpu
