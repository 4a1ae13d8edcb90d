// AVX-512 and AVX2 loops for add and mul where every operand's innermost dim
// is contiguous. 16-bit floats are converted in registers, 32 (16) per step,
// instead of through MapBlocks' float staging buffers: staging costs three
// extra stores per vector and made bfloat16 mul 0.15-0.18 ns per element in
// L2 (one thread, AMD Zen 4), as slow as the memory it should wait on at two
// threads. Large outputs are streamed (no read of every output line before
// it is overwritten). The result is the float sum, product or fused
// a + alpha * b (add with alpha != 1) rounded to T, as MapBlocks computes it
// (cpu/kernels/elementwise/elementwise.h), so every ISA gives the same bits.
#ifndef POLYOPS_CPU_KERNELS_ELEMENTWISE_BINARY_VECTOR_H_
#define POLYOPS_CPU_KERNELS_ELEMENTWISE_BINARY_VECTOR_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/elementwise_layout.h"
#include "cpu/kernels/rows/avx2_rows.h"
#include "cpu/kernels/rows/avx512_rows.h"
#include "cpu/kernels/rows/row_kernels.h"
#include "cpu/runtime/parallel.h"

namespace polyops::cpu {

// kAddScaled: a + alpha * b (add's alpha != 1).
enum class BinaryOp { kAdd, kMul, kAddScaled };

#ifdef POLYOPS_HAVE_AVX512_ROWS
// As in avx512_rows.h: the intrinsics' "undefined" sources, once inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

template <BinaryOp kOp>
POLYOPS_TARGET_AVX512_ROWS POLYOPS_INLINE __m512 Apply16(__m512 a, __m512 b,
                                                         __m512 alpha) {
  if constexpr (kOp == BinaryOp::kAdd) {
    return _mm512_add_ps(a, b);
  } else if constexpr (kOp == BinaryOp::kMul) {
    return _mm512_mul_ps(a, b);
  } else {
    return _mm512_fmadd_ps(b, alpha, a);
  }
}

// y[i] = a[i] op b[i] for n elements; `stream`: y is 64-byte aligned and
// written with non-temporal stores (left unfenced, see ParallelForStreaming).
template <BinaryOp kOp, typename T, bool kNativeBf16>
POLYOPS_TARGET_AVX512_ROWS void BinarySpan512(const T* a, const T* b, T* y,
                                              int64_t n, bool stream,
                                              float alpha) {
  const __m512 scale = _mm512_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 lo = Apply16<kOp>(Load16(a + i), Load16(b + i), scale);
    const __m512 hi =
        Apply16<kOp>(Load16(a + i + 16), Load16(b + i + 16), scale);
    Store32(y + i, Round32<T, kNativeBf16>(lo, hi), stream);
  }
  for (; i < n; i += 16) {
    const __mmask16 mask = TailMask(std::min<int64_t>(16, n - i));
    Store16(y + i,
            Apply16<kOp>(Load16(a + i, mask), Load16(b + i, mask), scale),
            mask);
  }
}

#pragma GCC diagnostic pop
#endif  // POLYOPS_HAVE_AVX512_ROWS

#ifdef POLYOPS_HAVE_AVX2_ROWS
template <BinaryOp kOp>
POLYOPS_TARGET_AVX2 POLYOPS_INLINE __m256 Apply8(__m256 a, __m256 b,
                                                 __m256 alpha) {
  if constexpr (kOp == BinaryOp::kAdd) {
    return _mm256_add_ps(a, b);
  } else if constexpr (kOp == BinaryOp::kMul) {
    return _mm256_mul_ps(a, b);
  } else {
    return _mm256_fmadd_ps(b, alpha, a);
  }
}

// BinarySpan512 with 256-bit vectors (bfloat16 in even/odd pairs, see
// LoadPairs); the tail in MapBlocks' scalar steps.
template <BinaryOp kOp, typename T>
POLYOPS_TARGET_AVX2 void BinarySpan256(const T* a, const T* b, T* y, int64_t n,
                                       bool stream, float alpha) {
  const __m256 scale = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256 a_first, a_second, b_first, b_second;
    LoadPairs(a + i, a_first, a_second);
    LoadPairs(b + i, b_first, b_second);
    Store16x2(y + i,
              PackPairs<T>(Apply8<kOp>(a_first, b_first, scale),
                           Apply8<kOp>(a_second, b_second, scale)),
              stream);
  }
  for (; i < n; ++i) {
    const float u = Load(a + i), v = Load(b + i);
    Store(y + i, kOp == BinaryOp::kAdd   ? u + v
                 : kOp == BinaryOp::kMul ? u * v
                                         : std::fma(alpha, v, u));
  }
}
#endif  // POLYOPS_HAVE_AVX2_ROWS

// Runs y = a op b on the AVX-512 loop, or the AVX2 one, when the CPU has
// that ISA, T is a float type of at most 32 bits and every operand's
// innermost stride is 1 (a broadcast row of either input, stride 0 in an
// outer dim, qualifies). Operand 0 of `data` is y; `alpha` is kAddScaled's.
// Returns false, having done nothing, otherwise.
template <BinaryOp kOp, typename T>
bool TryBinaryVector(const ElementwiseLayout<3>& layout, void* const (&data)[3],
                     float alpha = 1.0f) {
#if defined(POLYOPS_HAVE_AVX512_ROWS) && defined(POLYOPS_HAVE_AVX2_ROWS)
  constexpr bool kFloat = std::is_same_v<T, float> || std::is_same_v<T, Half> ||
                          std::is_same_v<T, BFloat16>;
  if constexpr (kFloat) {
    const int last = layout.ndim - 1;
    const int64_t inner = layout.inner();
    if (!HasAvx2() || layout.numel == 0 || inner < 32) return false;
    for (int k = 0; k < 3; ++k) {
      if (layout.strides[k][last] != 1) return false;
    }
    // 16 KiB of each 16-bit operand per unit: a multiple of 32 elements, so
    // a 64-byte aligned run stays aligned at every unit's start.
    constexpr int64_t kSpan = 8192;
    const int64_t spans = (inner + kSpan - 1) / kSpan;
    const bool parallel = layout.numel >= kParallelGrain;
    const bool stream = layout.numel * int64_t{sizeof(T)} >= kStreamingBytes;
    auto run = [&](auto span) {
      ParallelForStreaming(layout.runs() * spans, parallel, [&](int64_t unit) {
        const int64_t begin = (unit % spans) * kSpan;
        int64_t at[3];
        layout.Offsets(unit / spans * inner + begin, at);
        T* y = static_cast<T*>(data[0]) + at[0];
        span(static_cast<const T*>(data[1]) + at[1],
             static_cast<const T*>(data[2]) + at[2], y,
             std::min(kSpan, inner - begin), StreamRow(y, stream), alpha);
      });
    };
    if (!HasAvx512()) {
      run(&BinarySpan256<kOp, T>);
    } else if (std::is_same_v<T, BFloat16> && HasAvx512Bf16()) {
      run(&BinarySpan512<kOp, T, true>);
    } else {
      run(&BinarySpan512<kOp, T, false>);
    }
    return true;
  }
#endif
  return false;
}

}  // namespace polyops::cpu

#endif  // POLYOPS_CPU_KERNELS_ELEMENTWISE_BINARY_VECTOR_H_
