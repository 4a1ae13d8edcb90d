// AVX-512 loops for the row kernels (rms_norm, add_rms_norm,
// causal_softmax): 16-bit floats are converted in registers, 16 per
// instruction, instead of through a staged float copy of the row, and large
// outputs are written with 64-byte non-temporal stores in the same loop
// (no second copy pass), left unfenced: callers run the rows under
// ParallelForStreaming (cpu/runtime/parallel.h), which fences once per thread.
// Every loop keeps the summation order and the rounding of the generic kernels
// in row_kernels.h, so the variants give the same bits
// (tests/cpu/test_cpu_isa.py).
#ifndef POLYOPS_CPU_KERNELS_ROWS_AVX512_ROWS_H_
#define POLYOPS_CPU_KERNELS_ROWS_AVX512_ROWS_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "cpu/kernels/rows/row_kernels.h"
#include "cpu/runtime/convert.h"

namespace polyops::cpu {

#if defined(__x86_64__)
#define POLYOPS_HAVE_AVX512_ROWS 1

// GCC 12 reports the intrinsics' own "undefined" register sources (e.g.
// _mm512_slli_epi32's, _mm512_extractf32x8_ps's) as (maybe) uninitialized
// once they are inlined here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// AVX-512 plus AVX512_BF16. The BF16 instruction runs only where
// kNativeBf16 is true, which the callers choose by HasAvx512Bf16(): GCC
// emits no BF16 instruction on its own (these loops have no __bf16 type).
#define POLYOPS_TARGET_AVX512_ROWS \
  __attribute__((                  \
      target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c")))
// Everything here runs only inside POLYOPS_TARGET_AVX512_ROWS functions.
#define POLYOPS_AVX512_INLINE POLYOPS_TARGET_AVX512_ROWS POLYOPS_INLINE

// The first n (< 16) lanes.
POLYOPS_AVX512_INLINE __mmask16 TailMask(int64_t n) {
  return static_cast<__mmask16>((1u << n) - 1u);
}

// Lane 0 of lanes after lane i += lane i + 8, then + 4, + 2, + 1 (additions
// commute bit for bit, so this is the scalar pairwise fold).
POLYOPS_AVX512_INLINE float FoldLanes16(__m512 lanes) {
  const __m256 eight = _mm256_add_ps(_mm512_castps512_ps256(lanes),
                                     _mm512_extractf32x8_ps(lanes, 1));
  const __m128 four = _mm_add_ps(_mm256_castps256_ps128(eight),
                                 _mm256_extractf128_ps(eight, 1));
  const __m128 two = _mm_add_ps(four, _mm_movehl_ps(four, four));
  return _mm_cvtss_f32(_mm_add_ss(two, _mm_movehdup_ps(two)));
}

// SumOfSquares' fold of its 64 lanes, held as four vectors of 16.
POLYOPS_AVX512_INLINE float FoldLanes64(const __m512 (&acc)[4]) {
  return FoldLanes16(_mm512_add_ps(_mm512_add_ps(acc[0], acc[2]),
                                   _mm512_add_ps(acc[1], acc[3])));
}

// 16 elements as float: float16 by F16C, bfloat16 by a widening shift.
template <typename T>
POLYOPS_AVX512_INLINE __m512 Load16(const T* p) {
  if constexpr (std::is_same_v<T, float>) {
    return _mm512_loadu_ps(p);
  } else {
    const __m256i bits =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    if constexpr (std::is_same_v<T, Half>) {
      return _mm512_cvtph_ps(bits);
    } else {
      return _mm512_castsi512_ps(
          _mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
    }
  }
}

// The first lanes of `mask` (a prefix); the others read nothing and are 0.
template <typename T>
POLYOPS_AVX512_INLINE __m512 Load16(const T* p, __mmask16 mask) {
  if constexpr (std::is_same_v<T, float>) {
    return _mm512_maskz_loadu_ps(mask, p);
  } else {
    const __m256i bits = _mm256_maskz_loadu_epi16(mask, p);
    if constexpr (std::is_same_v<T, Half>) {
      return _mm512_cvtph_ps(bits);
    } else {
      return _mm512_castsi512_ps(
          _mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
    }
  }
}

// bfloat16 rounding of 16 floats, in the high half of each 32-bit lane:
// ToBFloat16's sequence (round to nearest even; NaN quieted, sign and
// payload kept) in vector form: the path of CPUs without AVX512_BF16, and
// of chunks holding a subnormal, which its instruction flushes (Round32).
POLYOPS_AVX512_INLINE __m512i RoundBf16High(__m512 v) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i odd =
      _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded =
      _mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)), odd);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  return _mm512_mask_or_epi32(rounded, nan, bits, _mm512_set1_epi32(0x400000));
}

// 16 floats rounded to 16-bit: float16 by F16C (round to nearest even, as
// ToHalf and the F16C block conversion), bfloat16 by RoundBf16High.
template <typename T>
POLYOPS_AVX512_INLINE __m256i Round16(__m512 v) {
  if constexpr (std::is_same_v<T, Half>) {
    return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
  } else {
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(RoundBf16High(v), 16));
  }
}

// 32 elements (64 bytes of 16-bit, 128 of float) ready to store.
struct Chunk32 {
  __m512i lo, hi;  // 16-bit: lo holds all 32; float: 16 each
};

// kNativeBf16: bfloat16 by VCVTNE2PS2BF16 (32 in one instruction: round to
// nearest even, NaN quieted with its payload, as ToBFloat16) unless the
// chunk holds a subnormal, which that instruction flushes to zero
// (0x007fffff gives 0x0000, not 0x0080): such chunks take the integer path.
// kCheckSubnormal false: the caller knows no value of the chunk is
// subnormal, so VCVTNE2PS2BF16 needs no check.
template <typename T, bool kNativeBf16 = false, bool kCheckSubnormal = true>
POLYOPS_AVX512_INLINE Chunk32 Round32(__m512 lo, __m512 hi) {
  if constexpr (std::is_same_v<T, float>) {
    return {_mm512_castps_si512(lo), _mm512_castps_si512(hi)};
  } else if constexpr (std::is_same_v<T, Half>) {
    return {_mm512_inserti64x4(_mm512_castsi256_si512(Round16<T>(lo)),
                               Round16<T>(hi), 1),
            _mm512_setzero_si512()};
  } else {
    if constexpr (kNativeBf16) {
      constexpr int kSubnormal = 0x20;
      if (!kCheckSubnormal || (_mm512_fpclass_ps_mask(lo, kSubnormal) |
                               _mm512_fpclass_ps_mask(hi, kSubnormal)) == 0) {
        return {reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)),
                _mm512_setzero_si512()};
      }
    }
    // The high 16-bit word of every lane of lo, then of hi: one VPERMT2W
    // packs what two shifts, two VPMOVDW and an insert would.
    const __m512i odd_words = _mm512_set_epi16(
        63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29,
        27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    return {_mm512_permutex2var_epi16(RoundBf16High(lo), odd_words,
                                      RoundBf16High(hi)),
            _mm512_setzero_si512()};
  }
}

// `stream`: non-temporal stores, p 64-byte aligned (see StreamRow).
template <typename T>
POLYOPS_AVX512_INLINE void Store32(T* p, const Chunk32& chunk, bool stream) {
  __m512i* out = reinterpret_cast<__m512i*>(p);
  if (stream) {
    _mm512_stream_si512(out, chunk.lo);
    if constexpr (std::is_same_v<T, float>)
      _mm512_stream_si512(out + 1, chunk.hi);
  } else {
    _mm512_storeu_si512(out, chunk.lo);
    if constexpr (std::is_same_v<T, float>)
      _mm512_storeu_si512(out + 1, chunk.hi);
  }
}

template <typename T>
POLYOPS_AVX512_INLINE void Store16(T* p, __m512 v, __mmask16 mask) {
  if constexpr (std::is_same_v<T, float>) {
    _mm512_mask_storeu_ps(p, mask, v);
  } else {
    _mm256_mask_storeu_epi16(p, mask, Round16<T>(v));
  }
}

// sum(x^2) in SumOfSquares' order: 64 lane sums (four vectors), the tail
// summed in element order, then added to the lanes' pairwise fold.
template <typename T>
POLYOPS_AVX512_INLINE float SumOfSquares512(const T* x, int64_t n) {
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps(), _mm512_setzero_ps()};
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    for (int k = 0; k < 4; ++k) {
      const __m512 v = Load16(x + i + 16 * k);
      acc[k] = _mm512_add_ps(acc[k], _mm512_mul_ps(v, v));
    }
  }
  float tail = 0.0f;
  for (; i < n; ++i) {
    const float v = Load(x + i);
    tail += v * v;
  }
  return tail + FoldLanes64(acc);
}

// y = x * scale * w (w as float), in ScaleStagedRow's order. `next` and
// `next2` (nullptr: none) are the n-element rows the caller reads next,
// fetched into L2 while this row computes from L1: the row's first pass
// otherwise starts every row with only the hardware prefetcher reading,
// and the memory idles while this pass computes.
template <bool kNativeBf16, typename T>
POLYOPS_AVX512_INLINE void ScaleRow512(const T* x, const float* w, float scale,
                                       T* y, int64_t n, bool stream,
                                       const T* next = nullptr,
                                       const T* next2 = nullptr) {
  const __m512 s = _mm512_set1_ps(scale);
  stream = StreamRow(y, stream);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    if (next) PrefetchChunk32(next + i);
    if (next2) PrefetchChunk32(next2 + i);
    const __m512 lo =
        _mm512_mul_ps(_mm512_mul_ps(Load16(x + i), s), _mm512_loadu_ps(w + i));
    const __m512 hi = _mm512_mul_ps(_mm512_mul_ps(Load16(x + i + 16), s),
                                    _mm512_loadu_ps(w + i + 16));
    Store32(y + i, Round32<T, kNativeBf16>(lo, hi), stream);
  }
  if (i < n && next) PrefetchChunk32(next + i);
  if (i < n && next2) PrefetchChunk32(next2 + i);
  for (; i < n; i += 16) {
    const __mmask16 mask = n - i >= 16 ? __mmask16{0xffff} : TailMask(n - i);
    const __m512 v = _mm512_mul_ps(_mm512_mul_ps(Load16(x + i, mask), s),
                                   _mm512_maskz_loadu_ps(mask, w + i));
    Store16(y + i, v, mask);
  }
}

// rms_norm of one row: y = x / sqrt(mean(x^2) + eps) * w; `next`: the row
// read next (ScaleRow512).
template <typename T, bool kNativeBf16 = false>
POLYOPS_TARGET_AVX512_ROWS void RmsNormRow512(const T* x, const float* w, T* y,
                                              int64_t hidden, float eps,
                                              bool stream,
                                              const T* next = nullptr) {
  const float sum = SumOfSquares512(x, hidden);
  const float scale = 1.0f / std::sqrt(sum / static_cast<float>(hidden) + eps);
  ScaleRow512<kNativeBf16>(x, w, scale, y, hidden, stream, next);
}

// Round32 that also replaces lo and hi by the rounded values as float:
// what loading the stored chunk back would give.
template <typename T, bool kNativeBf16>
POLYOPS_AVX512_INLINE Chunk32 RoundKeep32(__m512& lo, __m512& hi) {
  if constexpr (std::is_same_v<T, float>) {
    return Round32<T>(lo, hi);
  } else if constexpr (std::is_same_v<T, Half>) {
    const __m256i half_lo = Round16<T>(lo), half_hi = Round16<T>(hi);
    lo = _mm512_cvtph_ps(half_lo);
    hi = _mm512_cvtph_ps(half_hi);
    return {_mm512_inserti64x4(_mm512_castsi256_si512(half_lo), half_hi, 1),
            _mm512_setzero_si512()};
  } else {
    const Chunk32 chunk = Round32<T, kNativeBf16>(lo, hi);
    lo = _mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm512_castsi512_si256(chunk.lo)), 16));
    hi = _mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(chunk.lo, 1)), 16));
    return chunk;
  }
}

// add_rms_norm of one row: x = a + b (rounded to T) goes to `x` and to
// `stage` (hidden elements of T, stays in L1), and its sum of squares is
// taken in the same pass (SumOfSquares' order: 64-element groups here, the
// tail from `stage`); then y = stage * scale * w as rms_norm's, fetching
// next_a and next_b, the rows read next (ScaleRow512).
template <typename T, bool kNativeBf16 = false>
POLYOPS_TARGET_AVX512_ROWS void AddRmsNormRow512(const T* a, const T* b,
                                                 const float* w, T* x, T* y,
                                                 int64_t hidden, float eps,
                                                 T* stage, bool stream,
                                                 const T* next_a = nullptr,
                                                 const T* next_b = nullptr) {
  const bool stream_x = StreamRow(x, stream);
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps(), _mm512_setzero_ps()};
  int64_t i = 0;
  for (; i + 64 <= hidden; i += 64) {
    for (int half = 0; half < 2; ++half) {
      const int64_t at = i + 32 * half;
      __m512 lo = _mm512_add_ps(Load16(a + at), Load16(b + at));
      __m512 hi = _mm512_add_ps(Load16(a + at + 16), Load16(b + at + 16));
      const Chunk32 chunk = RoundKeep32<T, kNativeBf16>(lo, hi);
      Store32(stage + at, chunk, false);
      Store32(x + at, chunk, stream_x);
      acc[2 * half] = _mm512_add_ps(acc[2 * half], _mm512_mul_ps(lo, lo));
      acc[2 * half + 1] =
          _mm512_add_ps(acc[2 * half + 1], _mm512_mul_ps(hi, hi));
    }
  }
  const int64_t groups_end = i;
  for (; i < hidden; i += 16) {
    const __mmask16 mask =
        hidden - i >= 16 ? __mmask16{0xffff} : TailMask(hidden - i);
    const __m512 v = _mm512_add_ps(Load16(a + i, mask), Load16(b + i, mask));
    Store16(stage + i, v, mask);
    Store16(x + i, v, mask);
  }
  float tail = 0.0f;
  for (i = groups_end; i < hidden; ++i) {
    const float v = Load(stage + i);
    tail += v * v;
  }
  const float sum = tail + FoldLanes64(acc);
  const float scale = 1.0f / std::sqrt(sum / static_cast<float>(hidden) + eps);
  ScaleRow512<kNativeBf16>(stage, w, scale, y, hidden, stream, next_a, next_b);
}

// The maximum of x[0, visible) as float, with the row staged into `stage`
// when kStage. Maxima of non-NaN values do not depend on the order, and
// vmaxps(v, lanes), like RowMax's std::max(lanes, v), keeps lanes when
// either is NaN, all lanes starting at x[0]: so the result is RowMax's (NaN
// only when x[0] is) while two chains, a masked tail and a tree fold keep
// it off the max latency.
// With kMin, *min gets the minimum the same way (a bound for the caller;
// NaN when x[0] is).
template <typename T, bool kStage = true, bool kMin = false>
POLYOPS_AVX512_INLINE float StageAndMax512(const T* x, float* stage,
                                           int64_t visible,
                                           float* min = nullptr) {
  __m512 highs[2], lows[2];
  highs[0] = highs[1] = lows[0] = lows[1] = _mm512_set1_ps(Load(x));
  int64_t i = 0;
  for (; i + 32 <= visible; i += 32) {
    for (int c = 0; c < 2; ++c) {
      const __m512 v = Load16(x + i + 16 * c);
      if constexpr (kStage) _mm512_storeu_ps(stage + i + 16 * c, v);
      highs[c] = _mm512_max_ps(v, highs[c]);
      if constexpr (kMin) lows[c] = _mm512_min_ps(v, lows[c]);
    }
  }
  for (; i < visible; i += 16) {
    const __mmask16 mask =
        visible - i >= 16 ? __mmask16{0xffff} : TailMask(visible - i);
    const __m512 v = Load16(x + i, mask);
    if constexpr (kStage) _mm512_mask_storeu_ps(stage + i, mask, v);
    highs[0] = _mm512_mask_max_ps(highs[0], mask, v, highs[0]);
    if constexpr (kMin) lows[0] = _mm512_mask_min_ps(lows[0], mask, v, lows[0]);
  }
  if constexpr (kMin) {
    *min = _mm512_reduce_min_ps(_mm512_min_ps(lows[1], lows[0]));
  }
  return _mm512_reduce_max_ps(_mm512_max_ps(highs[1], highs[0]));
}

// stage[at, at + 16) * s where below `visible`, +0 elsewhere (even when s
// is NaN: the multiply is masked).
POLYOPS_AVX512_INLINE __m512 ScaledVisible(const float* stage, int64_t at,
                                           int64_t visible, __m512 s) {
  const int64_t left = visible - at;
  const __mmask16 mask = left >= 16  ? __mmask16{0xffff}
                         : left <= 0 ? __mmask16{0}
                                     : TailMask(left);
  return _mm512_maskz_mul_ps(mask, _mm512_maskz_loadu_ps(mask, stage + at), s);
}

// y[0, k) = stage[0, visible) * s, then zeros: one pass of whole chunks, so
// a streamed row is written in full 64-byte lines. kStream as a template
// argument keeps the branch on it out of the chunk loops.
template <bool kNativeBf16, bool kStream, bool kCheckSubnormal, typename T>
POLYOPS_AVX512_INLINE void ScaleAndZeroChunks512(const float* stage, __m512 s,
                                                 T* y, int64_t k,
                                                 int64_t visible) {
  int64_t i = 0;
  // Wholly visible chunks need no masks (visible <= k).
  for (; i + 32 <= visible; i += 32) {
    Store32(y + i,
            Round32<T, kNativeBf16, kCheckSubnormal>(
                _mm512_mul_ps(_mm512_loadu_ps(stage + i), s),
                _mm512_mul_ps(_mm512_loadu_ps(stage + i + 16), s)),
            kStream);
  }
  if (i + 32 <= k && i < visible) {
    Store32(y + i,
            Round32<T, kNativeBf16, kCheckSubnormal>(
                ScaledVisible(stage, i, visible, s),
                ScaledVisible(stage, i + 16, visible, s)),
            kStream);
    i += 32;
  }
  // Wholly masked chunks: +0 in every dtype, nothing to load or round.
  const Chunk32 zeros = {_mm512_setzero_si512(), _mm512_setzero_si512()};
  for (; i + 32 <= k; i += 32) Store32(y + i, zeros, kStream);
  for (; i < k; i += 16) {
    const __mmask16 mask = k - i >= 16 ? __mmask16{0xffff} : TailMask(k - i);
    Store16(y + i, ScaledVisible(stage, i, visible, s), mask);
  }
}

// `normal`: the caller knows stage * inverse holds no subnormal.
template <bool kNativeBf16, typename T>
POLYOPS_AVX512_INLINE void ScaleAndZeroRow512(const float* stage, float inverse,
                                              T* y, int64_t k, int64_t visible,
                                              bool stream,
                                              bool normal = false) {
  const __m512 s = _mm512_set1_ps(inverse);
  if (StreamRow(y, stream)) {
    ScaleAndZeroChunks512<kNativeBf16, true, true>(stage, s, y, k, visible);
  } else if (normal) {
    ScaleAndZeroChunks512<kNativeBf16, false, false>(stage, s, y, k, visible);
  } else {
    ScaleAndZeroChunks512<kNativeBf16, false, true>(stage, s, y, k, visible);
  }
}

#undef POLYOPS_AVX512_INLINE
#pragma GCC diagnostic pop

#endif  // defined(__x86_64__)

}  // namespace polyops::cpu

#endif  // POLYOPS_CPU_KERNELS_ROWS_AVX512_ROWS_H_
