// AVX-512 loop for add and mul where every operand's innermost dim is
// contiguous. 16-bit floats are converted in registers, 32 per step, instead
// of through MapBlocks' float staging buffers: staging costs three extra
// 64-byte stores per 16 elements and made bfloat16 mul 0.15-0.18 ns per
// element in L2 (one thread), as slow as the memory it should wait on at two
// threads. Large outputs are streamed (no read of every output line before
// it is overwritten). The result is the float sum or product rounded once,
// as MapBlocks computes it, so every ISA gives the same bits.
#ifndef POLYOPS_CPU_BINARY512_H_
#define POLYOPS_CPU_BINARY512_H_

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/elementwise_layout.h"
#include "cpu/avx512_rows.h"
#include "cpu/parallel.h"
#include "cpu/row_kernels.h"

namespace polyops::cpu {

enum class BinaryOp { kAdd, kMul };

#ifdef POLYOPS_HAVE_AVX512_ROWS
// As in avx512_rows.h: the intrinsics' "undefined" sources, once inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

template <BinaryOp kOp>
POLYOPS_TARGET_AVX512_ROWS POLYOPS_INLINE __m512 Apply16(__m512 a, __m512 b) {
  if constexpr (kOp == BinaryOp::kAdd) {
    return _mm512_add_ps(a, b);
  } else {
    return _mm512_mul_ps(a, b);
  }
}

// y[i] = a[i] op b[i] for n elements; `stream`: y is 64-byte aligned and
// written with non-temporal stores (left unfenced, see ParallelForStreaming).
template <BinaryOp kOp, typename T, bool kNativeBf16>
POLYOPS_TARGET_AVX512_ROWS void BinarySpan512(const T* a, const T* b, T* y,
                                              int64_t n, bool stream) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 lo = Apply16<kOp>(Load16(a + i), Load16(b + i));
    const __m512 hi = Apply16<kOp>(Load16(a + i + 16), Load16(b + i + 16));
    Store32(y + i, Round32<T, kNativeBf16>(lo, hi), stream);
  }
  for (; i < n; i += 16) {
    const __mmask16 mask = TailMask(std::min<int64_t>(16, n - i));
    Store16(y + i, Apply16<kOp>(Load16(a + i, mask), Load16(b + i, mask)),
            mask);
  }
}

#pragma GCC diagnostic pop
#endif  // POLYOPS_HAVE_AVX512_ROWS

// Runs y = a op b on the AVX-512 loop when the CPU has AVX-512, T is a float
// type of at most 32 bits and every operand's innermost stride is 1 (a
// broadcast row of `b`, stride 0 in an outer dim, qualifies). Operand 0 of
// `data` is y. Returns false, having done nothing, otherwise.
template <BinaryOp kOp, typename T>
bool TryBinary512(const ElementwiseLayout<3>& layout, void* const (&data)[3]) {
#ifdef POLYOPS_HAVE_AVX512_ROWS
  constexpr bool kFloat = std::is_same_v<T, float> || std::is_same_v<T, Half> ||
                          std::is_same_v<T, BFloat16>;
  if constexpr (kFloat) {
    const int last = layout.ndim - 1;
    const int64_t inner = layout.inner();
    if (!HasAvx512() || layout.numel == 0 || inner < 32) return false;
    for (int k = 0; k < 3; ++k) {
      if (layout.strides[k][last] != 1) return false;
    }
    // 16 KiB of each 16-bit operand per unit: a multiple of 32 elements, so
    // a 64-byte aligned run stays aligned at every unit's start.
    constexpr int64_t kSpan = 8192;
    const int64_t spans = (inner + kSpan - 1) / kSpan;
    const bool parallel = layout.numel >= kParallelGrain;
    const bool stream = layout.numel * int64_t{sizeof(T)} >= kStreamingBytes;
    auto run = [&](auto native_bf16) {
      ParallelForStreaming(layout.runs() * spans, parallel, [&](int64_t unit) {
        const int64_t begin = (unit % spans) * kSpan;
        int64_t at[3];
        layout.Offsets(unit / spans * inner + begin, at);
        T* y = static_cast<T*>(data[0]) + at[0];
        BinarySpan512<kOp, T, decltype(native_bf16)::value>(
            static_cast<const T*>(data[1]) + at[1],
            static_cast<const T*>(data[2]) + at[2], y,
            std::min(kSpan, inner - begin), StreamRow(y, stream));
      });
    };
    if (std::is_same_v<T, BFloat16> && HasAvx512Bf16()) {
      run(std::true_type{});
    } else {
      run(std::false_type{});
    }
    return true;
  }
#endif
  return false;
}

}  // namespace polyops::cpu

#endif  // POLYOPS_CPU_BINARY512_H_
