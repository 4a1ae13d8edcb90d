// AVX2 loops for the row kernels (rms_norm, add_rms_norm, causal_softmax)
// and add / mul (cpu/kernels/elementwise/binary_vector.h) on CPUs without
// AVX-512 (AMD Zen 2/3, Intel client parts): the 256-bit counterparts of
// cpu/kernels/rows/avx512_rows.h. 16-bit floats are converted in registers, 8
// per instruction, rather than staged as a float copy of the row, and large
// outputs are written with 32-byte non-temporal stores in the same loop, left
// unfenced (callers run the rows under ParallelForStreaming). On AMD Zen 3 the
// staged rows ran bfloat16 rms_norm at 0.40x a copy's bandwidth on two threads
// (docs/perf/cpu_rms_norm.md). Each loop keeps the summation order and the
// rounding of the generic kernels in row_kernels.h, so every variant gives the
// same bits (tests/cpu/test_cpu_isa.py); tails shorter than a vector run those
// kernels' scalar steps, or a masked chunk where the memory is there (softmax).
#ifndef POLYOPS_CPU_KERNELS_ROWS_AVX2_ROWS_H_
#define POLYOPS_CPU_KERNELS_ROWS_AVX2_ROWS_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "cpu/kernels/rows/row_kernels.h"
#include "cpu/runtime/convert.h"

namespace polyops::cpu {

#if defined(__x86_64__)
#define POLYOPS_HAVE_AVX2_ROWS 1

// Everything here runs only inside POLYOPS_TARGET_AVX2 functions.
#define POLYOPS_AVX2_INLINE POLYOPS_TARGET_AVX2 POLYOPS_INLINE

// Lane 0 of lanes after lane i += lane i + 4, then + 2, + 1: the scalar
// pairwise fold's last three steps.
POLYOPS_AVX2_INLINE float FoldLanes8(__m256 lanes) {
  const __m128 four = _mm_add_ps(_mm256_castps256_ps128(lanes),
                                 _mm256_extractf128_ps(lanes, 1));
  const __m128 two = _mm_add_ps(four, _mm_movehl_ps(four, four));
  return _mm_cvtss_f32(_mm_add_ss(two, _mm_movehdup_ps(two)));
}

// 8 elements as float: float16 by F16C (bfloat16 goes through LoadPairs).
template <typename T>
POLYOPS_AVX2_INLINE __m256 Load8(const T* p) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, Half>);
  if constexpr (std::is_same_v<T, float>) {
    return _mm256_loadu_ps(p);
  } else {
    return _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
}

// ToBFloat16's rounding of 8 floats (to nearest even; NaN quieted, sign and
// payload kept), the result in the high half of each 32-bit lane. kNan
// false: the caller knows no lane is NaN.
template <bool kNan>
POLYOPS_AVX2_INLINE __m256i RoundBf16High8(__m256 v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i odd =
      _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7fff)), odd);
  if constexpr (!kNan) return rounded;
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  return _mm256_blendv_epi8(
      rounded, _mm256_or_si256(bits, _mm256_set1_epi32(0x400000)), nan);
}

// 16 elements, lo then hi, rounded to T as one 32-byte vector (16-bit) or
// two (float).
struct Chunk16 {
  __m256i lo, hi;  // 16-bit: lo holds all 16
};

// (bfloat16 goes through PackPairs, below.)
template <typename T>
POLYOPS_AVX2_INLINE Chunk16 Round16x2(__m256 lo, __m256 hi) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, Half>);
  if constexpr (std::is_same_v<T, float>) {
    return {_mm256_castps_si256(lo), _mm256_castps_si256(hi)};
  } else {
    return {_mm256_set_m128i(_mm256_cvtps_ph(hi, _MM_FROUND_TO_NEAREST_INT),
                             _mm256_cvtps_ph(lo, _MM_FROUND_TO_NEAREST_INT)),
            _mm256_setzero_si256()};
  }
}

// `stream`: non-temporal stores, p 32-byte aligned (StreamRow's rows are
// 64-byte aligned, so every 16-element chunk of them is).
template <typename T>
POLYOPS_AVX2_INLINE void Store16x2(T* p, const Chunk16& chunk, bool stream) {
  __m256i* out = reinterpret_cast<__m256i*>(p);
  if (stream) {
    _mm256_stream_si256(out, chunk.lo);
    if constexpr (std::is_same_v<T, float>)
      _mm256_stream_si256(out + 1, chunk.hi);
  } else {
    _mm256_storeu_si256(out, chunk.lo);
    if constexpr (std::is_same_v<T, float>)
      _mm256_storeu_si256(out + 1, chunk.hi);
  }
}

// The loops here take 16 elements at a time as two float vectors,
// "pairs": elements 0-7 and 8-15, except bfloat16, whose pairs are the
// even-indexed elements (a shift of the 32-bit lanes) and the odd ones (a
// mask): two instructions for 16 values where widening loads take four,
// and two more saved in the rounding back (PackPairs). Lane sums kept in
// pair order are put back in element order once per row (UnpairLanes), so
// the sums, and the bits, are the element-ordered kernels'. Weights must be
// in pair order too (PairOrderWeights).
template <typename T>
POLYOPS_AVX2_INLINE void LoadPairs(const T* p, __m256& first, __m256& second) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    const __m256i bits =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    first = _mm256_castsi256_ps(_mm256_slli_epi32(bits, 16));
    second = _mm256_castsi256_ps(_mm256_and_si256(
        bits, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
  } else {
    first = Load8(p);
    second = Load8(p + 8);
  }
}

// The pair's 16 values rounded to T, in element order.
// kNan false: the caller knows no value is NaN.
template <typename T, bool kNan = true>
POLYOPS_AVX2_INLINE Chunk16 PackPairs(__m256 first, __m256 second) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    // One compare finds a NaN in either vector; only then is the NaN path
    // (a compare, an OR and a blend per vector) needed. Even elements take
    // the low 16-bit word of each lane, odd ones the high word: one shift
    // and one blend.
    const __m256 nan = _mm256_cmp_ps(first, second, _CMP_UNORD_Q);
    __m256i even, odd;
    if (!kNan || __builtin_expect(_mm256_testz_ps(nan, nan), 1)) {
      even = RoundBf16High8<false>(first);
      odd = RoundBf16High8<false>(second);
    } else {
      even = RoundBf16High8<true>(first);
      odd = RoundBf16High8<true>(second);
    }
    return {_mm256_blend_epi16(_mm256_srli_epi32(even, 16), odd, 0xaa),
            _mm256_setzero_si256()};
  } else {
    return Round16x2<T>(first, second);
  }
}

// PackPairs that also replaces the pair by the rounded values as float:
// what loading the stored chunk back would give.
template <typename T>
POLYOPS_AVX2_INLINE Chunk16 PackPairsKeep(__m256& first, __m256& second) {
  const Chunk16 chunk = PackPairs<T>(first, second);
  if constexpr (std::is_same_v<T, Half>) {
    first = _mm256_cvtph_ps(_mm256_castsi256_si128(chunk.lo));
    second = _mm256_cvtph_ps(_mm256_extracti128_si256(chunk.lo, 1));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    first = _mm256_castsi256_ps(_mm256_slli_epi32(chunk.lo, 16));
    second = _mm256_castsi256_ps(_mm256_and_si256(
        chunk.lo, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  return chunk;
}

// Lane sums kept in pair order, put in element order (elements 0-7 in
// first, 8-15 in second). For bfloat16, unpacking interleaves even and odd
// within each 128-bit half (0-3 and 8-11, then 4-7 and 12-15).
template <typename T>
POLYOPS_AVX2_INLINE void UnpairLanes(__m256& first, __m256& second) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    const __m256 low = _mm256_unpacklo_ps(first, second);
    const __m256 high = _mm256_unpackhi_ps(first, second);
    first = _mm256_permute2f128_ps(low, high, 0x20);
    second = _mm256_permute2f128_ps(low, high, 0x31);
  }
}

// w[0, n) (float) in T's pair order, in place: every whole 16 elements
// (bfloat16: the even-indexed ones, then the odd ones); the rest as is.
template <typename T>
inline void PairOrderWeights(float* w, int64_t n) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    for (int64_t i = 0; i + 16 <= n; i += 16) {
      float chunk[16];
      for (int j = 0; j < 8; ++j) {
        chunk[j] = w[i + 2 * j];
        chunk[8 + j] = w[i + 2 * j + 1];
      }
      std::memcpy(w + i, chunk, sizeof(chunk));
    }
  }
}

// The sum of squares' 64 lanes (as 8 vectors in pair order) folded as
// SumOfSquares does: lane + 32, + 16, + 8 across the vectors, then within
// one.
template <typename T>
POLYOPS_AVX2_INLINE float FoldPairLanes64(__m256 (&acc)[8]) {
  for (int k = 0; k < 8; k += 2) UnpairLanes<T>(acc[k], acc[k + 1]);
  const __m256 half0 = _mm256_add_ps(acc[0], acc[4]);
  const __m256 half1 = _mm256_add_ps(acc[1], acc[5]);
  const __m256 half2 = _mm256_add_ps(acc[2], acc[6]);
  const __m256 half3 = _mm256_add_ps(acc[3], acc[7]);
  return FoldLanes8(
      _mm256_add_ps(_mm256_add_ps(half0, half2), _mm256_add_ps(half1, half3)));
}

// sum(x^2) in SumOfSquares' order: 64 lane sums (eight vectors), the tail
// summed in element order, then added to the lanes' pairwise fold.
template <typename T>
POLYOPS_AVX2_INLINE float SumOfSquares256(const T* x, int64_t n) {
  __m256 acc[8];
  for (__m256& a : acc) a = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
#pragma GCC unroll 4
    for (int k = 0; k < 8; k += 2) {
      __m256 first, second;
      LoadPairs(x + i + 8 * k, first, second);
      acc[k] = _mm256_add_ps(acc[k], _mm256_mul_ps(first, first));
      acc[k + 1] = _mm256_add_ps(acc[k + 1], _mm256_mul_ps(second, second));
    }
  }
  float tail = 0.0f;
  for (; i < n; ++i) {
    const float v = Load(x + i);
    tail += v * v;
  }
  return tail + FoldPairLanes64<T>(acc);
}

// y[at, at + 16) = x * s * w, w in pair order.
template <typename T>
POLYOPS_AVX2_INLINE Chunk16 Scaled16(const T* x, const float* w, __m256 s,
                                     int64_t at) {
  __m256 first, second;
  LoadPairs(x + at, first, second);
  return PackPairs<T>(
      _mm256_mul_ps(_mm256_mul_ps(first, s), _mm256_loadu_ps(w + at)),
      _mm256_mul_ps(_mm256_mul_ps(second, s), _mm256_loadu_ps(w + at + 8)));
}

// y = x * scale * w (w as float, in T's pair order), in ScaleStagedRow's
// order; `next` and `next2` (nullptr: none), the rows the caller reads
// next, are fetched into L2 meanwhile (see ScaleRow512).
template <typename T>
POLYOPS_AVX2_INLINE void ScaleRow256(const T* x, const float* w, float scale,
                                     T* y, int64_t n, bool stream,
                                     const T* next = nullptr,
                                     const T* next2 = nullptr) {
  const __m256 s = _mm256_set1_ps(scale);
  stream = StreamRow(y, stream);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    if (next) PrefetchChunk32(next + i);
    if (next2) PrefetchChunk32(next2 + i);
    Store16x2(y + i, Scaled16(x, w, s, i), stream);
    Store16x2(y + i + 16, Scaled16(x, w, s, i + 16), stream);
  }
  if (i < n && next) PrefetchChunk32(next + i);
  if (i < n && next2) PrefetchChunk32(next2 + i);
  for (; i + 16 <= n; i += 16) Store16x2(y + i, Scaled16(x, w, s, i), stream);
  for (; i < n; ++i) Store(y + i, Load(x + i) * scale * w[i]);
}

// rms_norm of one row: y = x / sqrt(mean(x^2) + eps) * w, w in T's pair
// order (PairOrderWeights); `stream`: a large output (StreamRow); `next`:
// the row read next (ScaleRow256).
template <typename T>
POLYOPS_TARGET_AVX2 void RmsNormRow256(const T* x, const float* w, T* y,
                                       int64_t hidden, float eps, bool stream,
                                       const T* next) {
  const float sum = SumOfSquares256(x, hidden);
  const float scale = 1.0f / std::sqrt(sum / static_cast<float>(hidden) + eps);
  ScaleRow256(x, w, scale, y, hidden, stream, next);
}

// add_rms_norm of one row, as AddRmsNormRow512: x = a + b (rounded to T)
// goes to `x` and to `stage` (hidden elements of T, stays in L1) with its
// sum of squares taken in the same pass, then y = stage * scale * w (w in
// pair order), fetching next_a and next_b meanwhile.
template <typename T>
POLYOPS_TARGET_AVX2 void AddRmsNormRow256(const T* a, const T* b,
                                          const float* w, T* x, T* y,
                                          int64_t hidden, float eps, T* stage,
                                          bool stream, const T* next_a,
                                          const T* next_b) {
  const bool stream_x = StreamRow(x, stream);
  __m256 acc[8];
  for (__m256& v : acc) v = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 64 <= hidden; i += 64) {
#pragma GCC unroll 4
    for (int k = 0; k < 8; k += 2) {
      const int64_t at = i + 8 * k;
      __m256 a_first, a_second, b_first, b_second;
      LoadPairs(a + at, a_first, a_second);
      LoadPairs(b + at, b_first, b_second);
      __m256 first = _mm256_add_ps(a_first, b_first);
      __m256 second = _mm256_add_ps(a_second, b_second);
      const Chunk16 chunk = PackPairsKeep<T>(first, second);
      Store16x2(stage + at, chunk, false);
      Store16x2(x + at, chunk, stream_x);
      acc[k] = _mm256_add_ps(acc[k], _mm256_mul_ps(first, first));
      acc[k + 1] = _mm256_add_ps(acc[k + 1], _mm256_mul_ps(second, second));
    }
  }
  float tail = 0.0f;
  for (; i < hidden; ++i) {
    Store(stage + i, Load(a + i) + Load(b + i));
    x[i] = stage[i];
    const float v = Load(stage + i);
    tail += v * v;
  }
  const float sum = tail + FoldPairLanes64<T>(acc);
  const float scale = 1.0f / std::sqrt(sum / static_cast<float>(hidden) + eps);
  ScaleRow256(stage, w, scale, y, hidden, stream, next_a, next_b);
}

// All-ones in the first `left` (clamped to [0, 8]) of 8 32-bit lanes.
POLYOPS_AVX2_INLINE __m256i TailMask8(int64_t left) {
  const int count = static_cast<int>(std::clamp<int64_t>(left, 0, 8));
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(count),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Masks of the first `left` elements of a 16-element chunk in T's pair
// order (LoadPairs).
template <typename T>
POLYOPS_AVX2_INLINE void PairTailMasks(int64_t left, __m256& first,
                                       __m256& second) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    const __m256i count =
        _mm256_set1_epi32(static_cast<int>(std::clamp<int64_t>(left, 0, 16)));
    first = _mm256_castsi256_ps(_mm256_cmpgt_epi32(
        count, _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)));
    second = _mm256_castsi256_ps(_mm256_cmpgt_epi32(
        count, _mm256_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15)));
  } else {
    first = _mm256_castsi256_ps(TailMask8(left));
    second = _mm256_castsi256_ps(TailMask8(left - 8));
  }
}

// The maximum of x[0, visible) as float, with the row staged into `stage`
// when kStage: StageAndMax512's reasoning (vmaxps keeps the lanes when
// either operand is NaN, every lane starts at x[0]), so the result is
// RowMax's; *min gets the minimum the same way (a bound for the caller;
// NaN when x[0] is). The stage holds every whole 16-element chunk in T's
// pair order, the rest in element order. x holds `readable` >= visible
// elements (the row's keys): a tail of fewer than 16 is read as one more
// chunk when they are there, its lanes past `visible` replaced by x[0] (so
// they change no bound) and staged as whatever they hold, which the callers
// mask.
// 16 elements from x in pair order, also stored to `stage` when kStage.
template <bool kStage, typename T>
POLYOPS_AVX2_INLINE void LoadAndStagePairs(const T* x, float* stage,
                                           __m256 (&v)[2]) {
  LoadPairs(x, v[0], v[1]);
  if constexpr (kStage) {
    _mm256_storeu_ps(stage, v[0]);
    _mm256_storeu_ps(stage + 8, v[1]);
  }
}

template <typename T, bool kStage = true>
POLYOPS_AVX2_INLINE float StageAndMax256(const T* x, float* stage,
                                         int64_t visible, int64_t readable,
                                         float* min) {
  const __m256 first = _mm256_set1_ps(Load(x));
  __m256 highs[2] = {first, first}, lows[2] = {first, first};
  int64_t i = 0;
  for (; i + 16 <= visible; i += 16) {
    __m256 v[2];
    LoadAndStagePairs<kStage>(x + i, stage + i, v);
    for (int c = 0; c < 2; ++c) {
      highs[c] = _mm256_max_ps(v[c], highs[c]);
      lows[c] = _mm256_min_ps(v[c], lows[c]);
    }
  }
  if (i < visible && i + 16 <= readable) {
    __m256 v[2], keep[2];
    LoadAndStagePairs<kStage>(x + i, stage + i, v);
    PairTailMasks<T>(visible - i, keep[0], keep[1]);
    for (int c = 0; c < 2; ++c) {
      v[c] = _mm256_blendv_ps(first, v[c], keep[c]);
      highs[c] = _mm256_max_ps(v[c], highs[c]);
      lows[c] = _mm256_min_ps(v[c], lows[c]);
    }
    i = visible;
  }
  const __m256 high = _mm256_max_ps(highs[1], highs[0]);
  __m128 four =
      _mm_max_ps(_mm256_extractf128_ps(high, 1), _mm256_castps256_ps128(high));
  __m128 two = _mm_max_ps(_mm_movehl_ps(four, four), four);
  float max = _mm_cvtss_f32(_mm_max_ss(_mm_movehdup_ps(two), two));
  const __m256 low = _mm256_min_ps(lows[1], lows[0]);
  four = _mm_min_ps(_mm256_extractf128_ps(low, 1), _mm256_castps256_ps128(low));
  two = _mm_min_ps(_mm_movehl_ps(four, four), four);
  *min = _mm_cvtss_f32(_mm_min_ss(_mm_movehdup_ps(two), two));
  for (; i < visible; ++i) {
    const float v = Load(x + i);
    if constexpr (kStage) stage[i] = v;
    max = std::max(max, v);
    *min = std::min(*min, v);
  }
  return max;
}

// y[0, k) = stage[0, visible) * inverse rounded to T, then zeros (+0 in
// every dtype): one pass of 16-element chunks, so a streamed row is written
// in whole lines; what is left past the last chunk takes scalar steps. The
// stage is StageAndMax256's (chunks in pair order, readable = k) and holds
// at least visible rounded up to 16 floats (kMaxStagedRow).
// kNan false: the caller knows stage * inverse holds no NaN.
template <typename T, bool kNan>
POLYOPS_AVX2_INLINE void ScaleAndZeroRow256(const float* stage, float inverse,
                                            T* y, int64_t k, int64_t visible,
                                            bool stream) {
  const __m256 s = _mm256_set1_ps(inverse);
  stream = StreamRow(y, stream);
  int64_t i = 0;
  for (; i + 16 <= visible; i += 16) {
    Store16x2(
        y + i,
        PackPairs<T, kNan>(_mm256_mul_ps(_mm256_loadu_ps(stage + i), s),
                           _mm256_mul_ps(_mm256_loadu_ps(stage + i + 8), s)),
        stream);
  }
  if (i < visible && i + 16 <= k) {
    // Lanes at or past `visible` are +0, whatever the stage holds there.
    __m256 keep_first, keep_second;
    PairTailMasks<T>(visible - i, keep_first, keep_second);
    Store16x2(
        y + i,
        PackPairs<T, kNan>(
            _mm256_and_ps(keep_first,
                          _mm256_mul_ps(_mm256_loadu_ps(stage + i), s)),
            _mm256_and_ps(keep_second,
                          _mm256_mul_ps(_mm256_loadu_ps(stage + i + 8), s))),
        stream);
    i += 16;
  }
  const Chunk16 zeros = {_mm256_setzero_si256(), _mm256_setzero_si256()};
  for (; i + 16 <= k; i += 16) Store16x2(y + i, zeros, stream);
  for (; i < k; ++i) {
    if (i < visible) {
      Store(y + i, stage[i] * inverse);
    } else {
      std::memset(static_cast<void*>(y + i), 0, sizeof(T));
    }
  }
}

#undef POLYOPS_AVX2_INLINE

#endif  // defined(__x86_64__)

}  // namespace polyops::cpu

#endif  // POLYOPS_CPU_KERNELS_ROWS_AVX2_ROWS_H_
