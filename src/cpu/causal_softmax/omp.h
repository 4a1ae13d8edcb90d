#ifndef POLYOPS_CPU_CAUSAL_SOFTMAX_OMP_H_
#define POLYOPS_CPU_CAUSAL_SOFTMAX_OMP_H_

#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>

#include "base/causal_softmax.h"
#include "core/dispatch.h"
#include "core/operator.h"
#include "cpu/kernels/elementwise/vector_exp.h"
#include "cpu/kernels/rows/avx2_rows.h"
#include "cpu/kernels/rows/avx512_rows.h"
#include "cpu/kernels/rows/row_kernels.h"

namespace polyops {
namespace cpu {

// Sixteen partial maxima / sums: one chain would wait on latency.
POLYOPS_INLINE float RowMax(const float* x, int64_t n) {
  constexpr int kLanes = 16;
  float partial[kLanes];
  for (int lane = 0; lane < kLanes; ++lane) partial[lane] = x[0];
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int lane = 0; lane < kLanes; ++lane) {
      partial[lane] = std::max(partial[lane], x[i + lane]);
    }
  }
  float result = x[0];
  for (; i < n; ++i) result = std::max(result, x[i]);
  for (int lane = 0; lane < kLanes; ++lane) {
    result = std::max(result, partial[lane]);
  }
  return result;
}

// The exp of a row of T: float32 rows keep SoftmaxExp's Cody-Waite
// reduction, 16-bit rows take the cheaper SoftmaxExp2Of
// (cpu/kernels/elementwise/vector_exp.h).
template <typename T>
inline constexpr bool kSoftmaxBase2 = !std::is_same_v<T, float>;

template <bool kBase2>
POLYOPS_INLINE float RowExp(float t) {
  return kBase2 ? SoftmaxExp2Of(t) : SoftmaxExp(t);
}

// e[i] = exp(x[i] - max) (e may be x) by RowExp, returns their sum:
// sixteen lane sums (the tail's elements added to the first lanes) folded
// pairwise (lane + 8, + 4, + 2, + 1: a short dependency chain, and the order
// of ExpShiftSum512's shuffles).
template <bool kBase2>
POLYOPS_INLINE float ExpShiftSum(const float* x, float max, float* e,
                                 int64_t n) {
  constexpr int kLanes = 16;
  float partial[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int lane = 0; lane < kLanes; ++lane) {
      e[i + lane] = RowExp<kBase2>(x[i + lane] - max);
      partial[lane] += e[i + lane];
    }
  }
  for (int lane = 0; i + lane < n; ++lane) {
    e[i + lane] = RowExp<kBase2>(x[i + lane] - max);
    partial[lane] += e[i + lane];
  }
  for (int width = kLanes / 2; width >= 1; width /= 2) {
    for (int lane = 0; lane < width; ++lane) {
      partial[lane] += partial[lane + width];
    }
  }
  return partial[0];
}

// One row: softmax of x[0, visible), zeros in y[visible, k). `stage` holds
// kMaxStagedRow floats; longer rows take three blocked passes instead.
template <typename T>
POLYOPS_INLINE void CausalSoftmaxRow(const T* x, T* y, int64_t k,
                                     int64_t visible, float* stage) {
  if (visible < k) {
    std::memset(static_cast<void*>(y + visible), 0,
                sizeof(T) * static_cast<size_t>(k - visible));
  }
  if (visible == 0) return;
  if (visible <= kMaxStagedRow) {
    LoadBlock(x, 1, stage, visible);
    const float max = RowMax(stage, visible);
    const float inverse =
        1.0f / ExpShiftSum<kSoftmaxBase2<T>>(stage, max, stage, visible);
    for (int64_t i = 0; i < visible; ++i) stage[i] *= inverse;
    StoreBlock(stage, y, 1, visible);
    return;
  }
  float max = Load(x);
  for (int64_t begin = 0; begin < visible; begin += kBlock) {
    const int64_t n = std::min(kBlock, visible - begin);
    LoadBlock(x + begin, 1, stage, n);
    max = std::max(max, RowMax(stage, n));
  }
  float sum = 0.0f;
  for (int64_t begin = 0; begin < visible; begin += kBlock) {
    const int64_t n = std::min(kBlock, visible - begin);
    LoadBlock(x + begin, 1, stage, n);
    sum += ExpShiftSum<kSoftmaxBase2<T>>(stage, max, stage, n);
  }
  const float inverse = 1.0f / sum;
  for (int64_t begin = 0; begin < visible; begin += kBlock) {
    const int64_t n = std::min(kBlock, visible - begin);
    LoadBlock(x + begin, 1, stage, n);
    ExpShiftSum<kSoftmaxBase2<T>>(stage, max, stage, n);
    for (int64_t i = 0; i < n; ++i) stage[i] *= inverse;
    StoreBlock(stage, y + begin, 1, n);
  }
}

POLYOPS_ROW_KERNEL_VARIANTS(CausalSoftmaxRow,
                            (const T* x, T* y, int64_t k, int64_t visible,
                             float* stage),
                            (x, y, k, visible, stage))

// The next row's visible keys (x[0, visible)) fetched into L2 while this
// row computes from L1, up to 8 KiB: they start a new page (a 1024-key
// float32 row is one), where the hardware prefetcher starts over. Into L2,
// not L1: there they do not evict this row's stage (bfloat16 2-thread ratio
// to the copy 0.85-0.91x with T0, 0.99-1.07x with T1,
// docs/backends/cpu_softmax.md). No ISA target: the AVX-512 and AVX2 rows both
// inline it.
template <typename T>
POLYOPS_INLINE void PrefetchVisibleKeys(const T* x, int64_t visible) {
#if defined(__x86_64__)
  const int64_t count = std::min(visible, 8192 / int64_t{sizeof(T)});
  for (int64_t at = 0; at < count; at += 64 / int64_t{sizeof(T)}) {
    _mm_prefetch(reinterpret_cast<const char*>(x + at), _MM_HINT_T1);
  }
#endif
}

#ifdef POLYOPS_HAVE_AVX2_ROWS
// 2^e as float for integer lanes e in [-126, 127].
POLYOPS_TARGET_AVX2 POLYOPS_INLINE __m256 PowerOfTwo256(__m256i e) {
  return _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23));
}

// y * 2^n for 8 lanes, rounded once as TimesPowerOfTwo's float64 product
// (AVX2 has no VSCALEFPS), or `special` where it is NaN. n is the integer
// in `shifted`'s low mantissa bits, y within [0.7, 1.5] (or NaN), n <= 0
// (a NaN lane's n is the clamp's). kInRange: the caller knows every n is
// at least -126, so 2^n is a normal float, the one product rounds once and
// carries a NaN y through (2^n is never NaN). Else, when every n is at
// least -125, the product is normal and exact: n is added to y's exponent
// field; otherwise it is taken in two steps from n = -126 down, y *
// 2^(n + 126) (exact: a normal float) and then * 2^-126, so a subnormal
// result is rounded once, and NaN lanes are set.
template <bool kInRange>
POLYOPS_TARGET_AVX2 POLYOPS_INLINE __m256
TimesPowerOfTwo256(__m256 y, __m256 shifted, __m256 shifter, __m256 special) {
  const __m256i n = _mm256_sub_epi32(_mm256_castps_si256(shifted),
                                     _mm256_castps_si256(shifter));
  if constexpr (kInRange) return _mm256_mul_ps(y, PowerOfTwo256(n));
  const __m256i low = _mm256_set1_epi32(-126);
  const __m256i below = _mm256_cmpgt_epi32(_mm256_set1_epi32(-125), n);
  if (__builtin_expect(_mm256_testz_si256(below, below), 1)) {
    return _mm256_castsi256_ps(
        _mm256_add_epi32(_mm256_castps_si256(y), _mm256_slli_epi32(n, 23)));
  }
  const __m256i split = _mm256_and_si256(_mm256_cmpgt_epi32(low, n), low);
  const __m256 result =
      _mm256_mul_ps(_mm256_mul_ps(y, PowerOfTwo256(_mm256_sub_epi32(n, split))),
                    PowerOfTwo256(split));
  return _mm256_blendv_ps(result, special,
                          _mm256_cmp_ps(special, special, _CMP_UNORD_Q));
}

// kInRange: every exp argument is NaN or at least kSoftmaxInRange, so the
// clamp changes nothing and is left out.
inline constexpr float kSoftmaxInRange = -80.0f;

// SoftmaxExp (kBase2 false) or SoftmaxExp2Of (kBase2 true) of kN vectors of
// 8 lanes in place, to the bit, each step taken for all kN before the next
// (the same operations per lane, so the same bits). One exp is a chain of
// about a dozen dependent operations: two chains at a time (one vector per
// call) ran the exp loop at 0.265 ns per element on AMD Zen 3, four in
// lockstep at 0.23 (six: 0.26, eight: 0.27; in cache, one thread).
template <bool kBase2, bool kInRange, int kN>
POLYOPS_TARGET_AVX2 POLYOPS_INLINE void RowExps256(__m256* v) {
  const __m256 shifter = _mm256_set1_ps(12582912.0f);  // 1.5 * 2**23
  // special: what a NaN lane returns (t, or y = t log2 e).
  __m256 shifted[kN], r[kN], p[kN], special[kN];
#pragma GCC unroll 8
  for (int j = 0; j < kN; ++j) {
    if constexpr (kBase2) {
      special[j] = _mm256_mul_ps(v[j], _mm256_set1_ps(kSoftmaxExpLog2e));
      const __m256 c =
          kInRange ? special[j]
                   : _mm256_max_ps(special[j], _mm256_set1_ps(kSoftmaxExp2Low));
      shifted[j] = _mm256_add_ps(c, shifter);
      r[j] = _mm256_sub_ps(c, _mm256_sub_ps(shifted[j], shifter));
    } else {
      special[j] = v[j];
      const __m256 c =
          kInRange ? v[j] : _mm256_max_ps(v[j], _mm256_set1_ps(kSoftmaxExpLow));
      shifted[j] = _mm256_add_ps(
          _mm256_mul_ps(c, _mm256_set1_ps(kSoftmaxExpLog2e)), shifter);
      const __m256 n = _mm256_sub_ps(shifted[j], shifter);
      r[j] = _mm256_fmadd_ps(n, _mm256_set1_ps(-kSoftmaxExpLn2High), c);
      r[j] = _mm256_fmadd_ps(n, _mm256_set1_ps(-kSoftmaxExpLn2Low), r[j]);
    }
  }
  constexpr float kC5 = kBase2 ? kSoftmaxExp2C5 : kSoftmaxExpC5;
  constexpr float kC4 = kBase2 ? kSoftmaxExp2C4 : kSoftmaxExpC4;
  constexpr float kC3 = kBase2 ? kSoftmaxExp2C3 : kSoftmaxExpC3;
  constexpr float kC2 = kBase2 ? kSoftmaxExp2C2 : kSoftmaxExpC2;
  constexpr float kC1 = kBase2 ? kSoftmaxExp2C1 : kSoftmaxExpC1;
#pragma GCC unroll 8
  for (int j = 0; j < kN; ++j) {
    p[j] = _mm256_fmadd_ps(_mm256_set1_ps(kC5), r[j], _mm256_set1_ps(kC4));
  }
#pragma GCC unroll 8
  for (int j = 0; j < kN; ++j) {
    p[j] = _mm256_fmadd_ps(p[j], r[j], _mm256_set1_ps(kC3));
  }
#pragma GCC unroll 8
  for (int j = 0; j < kN; ++j) {
    p[j] = _mm256_fmadd_ps(p[j], r[j], _mm256_set1_ps(kC2));
  }
#pragma GCC unroll 8
  for (int j = 0; j < kN; ++j) {
    p[j] = _mm256_fmadd_ps(p[j], r[j], _mm256_set1_ps(kC1));
  }
#pragma GCC unroll 8
  for (int j = 0; j < kN; ++j) {
    p[j] = _mm256_fmadd_ps(p[j], r[j], _mm256_set1_ps(1.0f));
  }
#pragma GCC unroll 8
  for (int j = 0; j < kN; ++j) {
    v[j] = TimesPowerOfTwo256<kInRange>(p[j], shifted[j], shifter, special[j]);
  }
}

template <bool kBase2, bool kInRange>
POLYOPS_TARGET_AVX2 POLYOPS_INLINE __m256 RowExp256(__m256 t) {
  RowExps256<kBase2, kInRange, 1>(&t);
  return t;
}

// ExpShiftSum with RowExp256, to the bit (e may be x): the 16 lane sums in
// two vectors, the tail's elements added to the first lanes, the same fold.
// x's 16-element chunks are in T's pair order (StageAndMax256), as far as
// `paired` elements; the lanes are put back in element order (UnpairLanes)
// before the fold. The tail's lanes past n compute an exp that is masked
// away, which may take TimesPowerOfTwo256's slower path (only time, not the
// result). kInRange: every x - max is NaN or at least kSoftmaxInRange.
template <typename T, bool kBase2, bool kInRange>
POLYOPS_TARGET_AVX2 POLYOPS_INLINE float ExpShiftSum256(const float* x,
                                                        float max, float* e,
                                                        int64_t n,
                                                        int64_t paired) {
  const __m256 shift = _mm256_set1_ps(max);
  __m256 lanes[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t i = 0;
  if constexpr (kInRange) {
    constexpr int kN = 4;
    for (; i + 8 * kN <= n; i += 8 * kN) {
      __m256 v[kN];
#pragma GCC unroll 8
      for (int j = 0; j < kN; ++j) {
        v[j] = _mm256_sub_ps(_mm256_loadu_ps(x + i + 8 * j), shift);
      }
      RowExps256<kBase2, true, kN>(v);
#pragma GCC unroll 8
      for (int j = 0; j < kN; ++j) {
        _mm256_storeu_ps(e + i + 8 * j, v[j]);
        lanes[j % 2] = _mm256_add_ps(lanes[j % 2], v[j]);
      }
    }
  }
  for (; i + 16 <= n; i += 16) {
    for (int c = 0; c < 2; ++c) {
      const __m256 v = RowExp256<kBase2, kInRange>(
          _mm256_sub_ps(_mm256_loadu_ps(x + i + 8 * c), shift));
      _mm256_storeu_ps(e + i + 8 * c, v);
      lanes[c] = _mm256_add_ps(lanes[c], v);
    }
  }
  if (i < n && i + 16 <= paired) {
    // The last 1-15 elements by masked loads and stores; the other lanes
    // add +0 (e >= +0, so no lane sum changes).
    __m256 keep[2];
    PairTailMasks<T>(n - i, keep[0], keep[1]);
    for (int c = 0; c < 2; ++c) {
      const __m256i mask = _mm256_castps_si256(keep[c]);
      const __m256 v = _mm256_and_ps(
          keep[c], RowExp256<kBase2, kInRange>(_mm256_sub_ps(
                       _mm256_maskload_ps(x + i + 8 * c, mask), shift)));
      _mm256_maskstore_ps(e + i + 8 * c, mask, v);
      lanes[c] = _mm256_add_ps(lanes[c], v);
    }
    i = n;
  }
  UnpairLanes<T>(lanes[0], lanes[1]);
  if (i == n) return FoldLanes8(_mm256_add_ps(lanes[0], lanes[1]));
  // A tail past the paired chunks, in element order.
  float partial[16];
  _mm256_storeu_ps(partial, lanes[0]);
  _mm256_storeu_ps(partial + 8, lanes[1]);
  for (int lane = 0; i + lane < n; ++lane) {
    e[i + lane] = RowExp<kBase2>(x[i + lane] - max);
    partial[lane] += e[i + lane];
  }
  for (int width = 8; width >= 1; width /= 2) {
    for (int lane = 0; lane < width; ++lane) {
      partial[lane] += partial[lane + width];
    }
  }
  return partial[0];
}

// CausalSoftmaxRow512 with 256-bit vectors: x converted in registers while
// its max is taken (16-bit rows staged as float), exp and sum as
// CausalSoftmaxRow, then the scaled row and its zeros in one pass (streamed
// when `stream`), the next row's visible keys fetched into L2 meanwhile.
// Long rows take CausalSoftmaxRow.
template <typename T>
POLYOPS_TARGET_AVX2 void CausalSoftmaxRow256(const T* x, T* y, int64_t k,
                                             int64_t visible, float* stage,
                                             bool stream, const T* next_x,
                                             int64_t next_visible) {
  if (visible == 0 || visible > kMaxStagedRow) {
    CausalSoftmaxRowAvx2(x, y, k, visible, stage);
    return;
  }
  const float* in = stage;
  float max, min;
  if constexpr (std::is_same_v<T, float>) {
    in = x;
    max = StageAndMax256<T, false>(x, nullptr, visible, k, &min);
  } else {
    max = StageAndMax256(x, stage, visible, k, &min);
  }
  PrefetchVisibleKeys(next_x, next_visible);
  // Scores within 80 of the max (the usual row; NaN bounds fail the test)
  // need no clamp and no per-vector range check in the exp.
  constexpr bool kBase2 = kSoftmaxBase2<T>;
  const float sum =
      min - max >= kSoftmaxInRange
          ? ExpShiftSum256<T, kBase2, true>(in, max, stage, visible, k)
          : ExpShiftSum256<T, kBase2, false>(in, max, stage, visible, k);
  // A sum that is not NaN had no NaN term, and is at least 1 (the max's
  // term), so no output is NaN and the rounding needs no NaN check.
  if (sum == sum) {
    ScaleAndZeroRow256<T, false>(stage, 1.0f / sum, y, k, visible, stream);
  } else {
    ScaleAndZeroRow256<T, true>(stage, 1.0f / sum, y, k, visible, stream);
  }
}
#endif  // POLYOPS_HAVE_AVX2_ROWS

#ifdef POLYOPS_HAVE_AVX512_ROWS
// As in cpu/kernels/rows/avx512_rows.h: GCC 12 reports the intrinsics' own
// "undefined" sources as maybe uninitialized once inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// SoftmaxExp on 16 lanes, to the bit: VRNDSCALEPS rounds n, VSCALEFPS
// applies 2^n (subnormal results rounded once, as SoftmaxExp's float64
// product), VMAXPS(low, t) keeps a NaN t, which then stays NaN throughout.
// 11 instructions for 16 exps.
POLYOPS_TARGET_AVX512_ROWS POLYOPS_INLINE __m512 SoftmaxExp512(__m512 t) {
  const __m512 c = _mm512_max_ps(_mm512_set1_ps(kSoftmaxExpLow), t);
  const __m512 n =
      _mm512_roundscale_ps(_mm512_mul_ps(c, _mm512_set1_ps(kSoftmaxExpLog2e)),
                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-kSoftmaxExpLn2High), c);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(-kSoftmaxExpLn2Low), r);
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(kSoftmaxExpC5), r,
                             _mm512_set1_ps(kSoftmaxExpC4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kSoftmaxExpC3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kSoftmaxExpC2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kSoftmaxExpC1));
  const __m512 y = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(y, n);
}

// SoftmaxExp2Of on 16 lanes, to the bit: VRNDSCALEPS rounds n, VREDUCEPS
// gives f = y - n in one instruction and 0 for y = -inf (so no clamp is
// needed: 2^n then makes that lane, and every y below -151, +0), VSCALEFPS
// applies 2^n. 9 instructions, 6 of them multiplies or FMAs, against
// SoftmaxExp512's 11 and 8: on AMD Zen 4 the loop of ExpShiftSum512 takes 7
// cycles per 16 exps instead of 9 (docs/backends/cpu_softmax.md).
POLYOPS_TARGET_AVX512_ROWS POLYOPS_INLINE __m512 SoftmaxExp2Of512(__m512 t) {
  const __m512 y = _mm512_mul_ps(t, _mm512_set1_ps(kSoftmaxExpLog2e));
  const __m512 n =
      _mm512_roundscale_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f =
      _mm512_reduce_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(kSoftmaxExp2C5), f,
                             _mm512_set1_ps(kSoftmaxExp2C4));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(kSoftmaxExp2C3));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(kSoftmaxExp2C2));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(kSoftmaxExp2C1));
  return _mm512_scalef_ps(_mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f)), n);
}

template <bool kBase2>
POLYOPS_TARGET_AVX512_ROWS POLYOPS_INLINE __m512 RowExp512(__m512 t) {
  if constexpr (kBase2) {
    return SoftmaxExp2Of512(t);
  } else {
    return SoftmaxExp512(t);
  }
}

// ExpShiftSum with RowExp512, to the bit (e may be x).
template <bool kBase2>
POLYOPS_TARGET_AVX512_ROWS POLYOPS_INLINE float ExpShiftSum512(const float* x,
                                                               float max,
                                                               float* e,
                                                               int64_t n) {
  const __m512 shift = _mm512_set1_ps(max);
  __m512 lanes = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v =
        RowExp512<kBase2>(_mm512_sub_ps(_mm512_loadu_ps(x + i), shift));
    _mm512_storeu_ps(e + i, v);
    lanes = _mm512_add_ps(lanes, v);
  }
  if (i < n) {
    const __mmask16 mask = TailMask(n - i);
    const __m512 v = RowExp512<kBase2>(
        _mm512_sub_ps(_mm512_maskz_loadu_ps(mask, x + i), shift));
    _mm512_mask_storeu_ps(e + i, mask, v);
    lanes = _mm512_mask_add_ps(lanes, mask, lanes, v);
  }
  return FoldLanes16(lanes);
}

// RowMax(x, n) without staging (float32 rows are read where they are).
POLYOPS_TARGET_AVX512_ROWS POLYOPS_INLINE float RowMax512(const float* x,
                                                          int64_t n) {
  return StageAndMax512<float, false>(x, nullptr, n);
}

// The AVX-512 row: x converted in registers while its max is taken, exp and
// sum as CausalSoftmaxRow (SoftmaxExp512), then the scaled row and its zeros
// written in one pass (streamed when `stream`). Long rows take
// CausalSoftmaxRow.
template <typename T, bool kNativeBf16 = false>
POLYOPS_TARGET_AVX512_ROWS void CausalSoftmaxRow512(const T* x, T* y, int64_t k,
                                                    int64_t visible,
                                                    float* stage, bool stream,
                                                    const T* next_x = nullptr,
                                                    int64_t next_visible = 0) {
  if (visible == 0 || visible > kMaxStagedRow) {
    CausalSoftmaxRowAvx512(x, y, k, visible, stage);
    return;
  }
  // float32 rows are read in place (twice, the second time from L1);
  // 16-bit rows are converted into `stage` once.
  const float* in = stage;
  float max, min = -std::numeric_limits<float>::infinity();
  if constexpr (std::is_same_v<T, float>) {
    in = x;
    max = RowMax512(x, visible);
  } else {
    max = StageAndMax512<T, true, kNativeBf16>(x, stage, visible, &min);
  }
  PrefetchVisibleKeys(next_x, next_visible);
  const float inverse =
      1.0f / ExpShiftSum512<kSoftmaxBase2<T>>(in, max, stage, visible);
  // Every e is at least exp(min - max) and the sum at most `visible` (each
  // e <= 1): past -69 (e >= 1e-30, e / 16384 >= 6e-35) no output is
  // subnormal, so VCVTNE2PS2BF16 needs no per-chunk check. NaN or -inf
  // bounds fail the test and keep the check.
  const bool normal = min - max >= -69.0f;
  ScaleAndZeroRow512<kNativeBf16>(stage, inverse, y, k, visible, stream,
                                  normal);
}

#pragma GCC diagnostic pop
#endif

}  // namespace cpu

// Slot 0: rows spread over OpenMP threads; each row's visible keys are
// staged as float once, with a vectorizable exp, compiled for the x86-64
// baseline, AVX2 and AVX-512 and chosen at run time. Rows longer than 16384
// keys take three blocked passes. With AVX-512 or AVX2, 16-bit rows are
// converted in registers and large outputs streamed
// (cpu/kernels/rows/avx512_rows.h, cpu/kernels/rows/avx2_rows.h).
template <>
class Operator<CausalSoftmax, Device::Type::kCpu, 0> : public CausalSoftmax {
 public:
  static constexpr const char* kImplementationName = "omp";
  using CausalSoftmax::CausalSoftmax;

  void operator()(const Handle&, const Args& args) const override {
    DispatchDataType<POLYOPS_FLOAT_TYPES>(
        dtype_, "polyops.causal_softmax", [&](auto tag) {
          using T = typename decltype(tag)::type;
          const T* x = args.input.data_as<const T>();
          T* y = args.out->data_as<T>();
          const int64_t keys = keys_;
          const bool parallel = rows_.numel * keys >= cpu::kParallelGrain;
#if defined(POLYOPS_HAVE_AVX512_ROWS) && defined(POLYOPS_HAVE_AVX2_ROWS)
          const bool stream =
              rows_.numel * keys * int64_t{sizeof(T)} >= cpu::kStreamingBytes;
          // row_fn(x, y, keys, visible, stage, stream, next row's x and
          // visible keys, 0 for none).
          auto run = [&](auto row_fn) {
            cpu::ParallelForStreaming(rows_.numel, parallel, [&](int64_t row) {
              int64_t at[2], next[2] = {0, 0};
              rows_.Offsets(row, at);
              const bool last = row + 1 == rows_.numel;
              if (!last) rows_.Offsets(row + 1, next);
              alignas(64) float stage[cpu::kMaxStagedRow];
              row_fn(x + at[1], y + at[0], keys, VisibleKeys(row), stage,
                     stream, x + next[1], last ? 0 : VisibleKeys(row + 1));
            });
          };
          if (cpu::HasAvx512()) {
            if (std::is_same_v<T, BFloat16> && cpu::HasAvx512Bf16()) {
              run(&cpu::CausalSoftmaxRow512<T, true>);
            } else {
              run(&cpu::CausalSoftmaxRow512<T, false>);
            }
            return;
          }
          if (cpu::HasAvx2()) {
            run(&cpu::CausalSoftmaxRow256<T>);
            return;
          }
#endif
          const auto row_kernel = cpu::CausalSoftmaxRowForCpu<T>();
          cpu::ParallelFor(rows_.numel, parallel, [&](int64_t row) {
            int64_t at[2];
            rows_.Offsets(row, at);
            alignas(64) float stage[cpu::kMaxStagedRow];
            row_kernel(x + at[1], y + at[0], keys, VisibleKeys(row), stage);
          });
        });
  }
};

}  // namespace polyops

#endif  // POLYOPS_CPU_CAUSAL_SOFTMAX_OMP_H_
