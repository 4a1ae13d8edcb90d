// Row-wise building blocks of the normalization kernels: each walks one row
// in kBlock pieces staged as float (direct pointers for float32).
#ifndef POLYOPS_CPU_KERNELS_ROWS_ROW_KERNELS_H_
#define POLYOPS_CPU_KERNELS_ROWS_ROW_KERNELS_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "cpu/kernels/elementwise/elementwise.h"
#include "cpu/runtime/convert.h"

namespace polyops::cpu {

// Row kernels are compiled once per ISA tier and picked by PickIsa
// (cpu/runtime/isa.h).
// Declares Name##Base, Name##Avx2 and Name##Avx512 (templates over T) that
// all inline the kernel `Name`, and Name##ForCpu<T>() picking one.
#define POLYOPS_ROW_KERNEL_VARIANTS(Name, Params, Args)               \
  template <typename T>                                               \
  void Name##Base Params {                                            \
    Name Args;                                                        \
  }                                                                   \
  template <typename T>                                               \
  POLYOPS_TARGET_AVX2 void Name##Avx2 Params {                        \
    Name Args;                                                        \
  }                                                                   \
  template <typename T>                                               \
  POLYOPS_TARGET_AVX512 void Name##Avx512 Params {                    \
    Name Args;                                                        \
  }                                                                   \
  template <typename T>                                               \
  auto Name##ForCpu() {                                               \
    return PickIsa(&Name##Base<T>, &Name##Avx2<T>, &Name##Avx512<T>); \
  }

// Rows up to this long are staged whole as float on the stack (64 KiB), so
// each element is converted once in and once out; longer rows fall back to
// two blocked passes.
inline constexpr int64_t kMaxStagedRow = 16384;

// A float view of src[begin, begin + n): the data itself for float32,
// else `buffer` filled by conversion.
template <typename T>
POLYOPS_INLINE const float* StageIn(const T* src, float* buffer, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    return src;
  } else {
    LoadBlock(src, 1, buffer, n);
    return buffer;
  }
}

// 64 independent partial sums: four AVX-512 accumulators (eight AVX2 ones),
// so the loop is not bound by the latency of one add chain. The lanes, not
// the vector width, fix the summation order: every ISA gives the same bits.
// The lanes are folded pairwise (lane + 32, + 16, ..., + 1): six dependent
// adds, where a chain over the 64 lanes cost 0.013 ns per element of a
// 4096-wide row (a tenth of the row) on AMD Zen 4; then the tail's sum is
// added.
POLYOPS_INLINE float SumOfSquares(const float* x, int64_t n) {
  constexpr int kLanes = 64;
  float partial[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int lane = 0; lane < kLanes; ++lane) {
      partial[lane] += x[i + lane] * x[i + lane];
    }
  }
  float tail = 0.0f;
  for (; i < n; ++i) tail += x[i] * x[i];
  for (int width = kLanes / 2; width >= 1; width /= 2) {
    for (int lane = 0; lane < width; ++lane) {
      partial[lane] += partial[lane + width];
    }
  }
  return tail + partial[0];
}

// y = x * scale * w over one row.
template <typename T>
inline void ScaleRow(const T* x, const T* w, float scale, T* y,
                     int64_t hidden) {
  float x_buffer[kBlock], w_buffer[kBlock], y_buffer[kBlock];
  for (int64_t begin = 0; begin < hidden; begin += kBlock) {
    const int64_t n = std::min(kBlock, hidden - begin);
    const float* xs = StageIn(x + begin, x_buffer, n);
    const float* ws = StageIn(w + begin, w_buffer, n);
    float* ys;
    if constexpr (std::is_same_v<T, float>) {
      ys = y + begin;
    } else {
      ys = y_buffer;
    }
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) ys[i] = xs[i] * scale * ws[i];
    if constexpr (!std::is_same_v<T, float>) StoreBlock(ys, y + begin, 1, n);
  }
}

// y = x * scale * w for a staged row: x and w are float views of the whole
// row. bfloat16 is rounded in the same loop; float16 goes through `stage`
// (may alias x) and the F16C block conversion.
template <typename T>
POLYOPS_INLINE void ScaleStagedRow(const float* x, const float* w, float scale,
                                   T* y, float* stage, int64_t hidden) {
  if constexpr (std::is_same_v<T, float>) {
    for (int64_t i = 0; i < hidden; ++i) y[i] = x[i] * scale * w[i];
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    uint16_t* bits = reinterpret_cast<uint16_t*>(y);
    for (int64_t i = 0; i < hidden; ++i) {
      const uint32_t value = FloatToBits(x[i] * scale * w[i]);
      const uint32_t rounded = value + 0x7fffu + ((value >> 16) & 1u);
      const bool is_nan = (value & 0x7fffffffu) > 0x7f800000u;
      bits[i] = is_nan ? static_cast<uint16_t>((value >> 16) | 0x40u)
                       : static_cast<uint16_t>(rounded >> 16);
    }
  } else {
    for (int64_t i = 0; i < hidden; ++i) stage[i] = x[i] * scale * w[i];
    StoreBlock(stage, y, 1, hidden);
  }
}

// Outputs at least this large bypass the cache (StreamStore): they cannot
// stay cached for the next op anyway, and streaming them avoids reading
// every output line from memory before overwriting it.
inline constexpr int64_t kStreamingBytes = int64_t{16} << 20;

// Whether a row written from `p` can take the vector loops' non-temporal
// path: asked for and 64-byte aligned (then every 32-byte and 64-byte chunk
// is).
template <typename T>
inline bool StreamRow(const T* p, bool stream) {
  return stream && (reinterpret_cast<uintptr_t>(p) & 63) == 0;
}

// The 32 elements from p (one or two 64-byte lines) fetched into L2. No ISA
// target: the AVX-512 and AVX2 row loops both inline it.
template <typename T>
POLYOPS_INLINE void PrefetchChunk32(const T* p) {
#if defined(__x86_64__)
  for (int64_t byte = 0; byte < 32 * int64_t{sizeof(T)}; byte += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(p) + byte, _MM_HINT_T1);
  }
#endif
}

// memcpy with non-temporal 16-byte stores (SSE2, so every x86-64 has them),
// fenced so the data is visible to other threads once this returns.
POLYOPS_INLINE void StreamStore(void* dst, const void* src, int64_t bytes) {
#if defined(__x86_64__)
  char* out = static_cast<char*>(dst);
  const char* in = static_cast<const char*>(src);
  const int64_t head =
      std::min<int64_t>(bytes, (-reinterpret_cast<uintptr_t>(out)) & 15);
  std::memcpy(out, in, head);
  out += head, in += head, bytes -= head;
  for (; bytes >= 16; bytes -= 16, out += 16, in += 16) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(out),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(in)));
  }
  std::memcpy(out, in, bytes);
  _mm_sfence();
#else
  std::memcpy(dst, src, bytes);
#endif
}

// Normalizes one row that is staged whole as float (xs, weight ws):
// y = xs / sqrt(mean(xs^2) + eps) * ws. rms_norm and add_rms_norm share it,
// so add_rms_norm's y equals rms_norm(x_out) bit for bit.
template <typename T>
POLYOPS_INLINE void NormalizeStagedRow(const float* xs, const float* ws, T* y,
                                       int64_t hidden, float eps,
                                       float* stage) {
  const float sum = SumOfSquares(xs, hidden);
  const float scale = 1.0f / std::sqrt(sum / static_cast<float>(hidden) + eps);
  ScaleStagedRow(xs, ws, scale, y, stage, hidden);
}

// The same for rows longer than kMaxStagedRow: two passes in kBlock pieces.
template <typename T>
inline void NormalizeBlockedRow(const T* x, const T* w, T* y, int64_t hidden,
                                float eps) {
  float buffer[kBlock];
  float sum = 0.0f;
  for (int64_t begin = 0; begin < hidden; begin += kBlock) {
    const int64_t n = std::min(kBlock, hidden - begin);
    sum += SumOfSquares(StageIn(x + begin, buffer, n), n);
  }
  const float scale = 1.0f / std::sqrt(sum / static_cast<float>(hidden) + eps);
  ScaleRow(x, w, scale, y, hidden);
}

}  // namespace polyops::cpu

#endif  // POLYOPS_CPU_KERNELS_ROWS_ROW_KERNELS_H_
