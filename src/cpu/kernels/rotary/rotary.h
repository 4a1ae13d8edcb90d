// The rotation shared by rotary_embedding and apply_rotary_pos_emb.
#ifndef POLYOPS_CPU_KERNELS_ROTARY_ROTARY_H_
#define POLYOPS_CPU_KERNELS_ROTARY_ROTARY_H_

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "base/rotary_layout.h"
#include "cpu/kernels/elementwise/elementwise.h"
#include "cpu/runtime/convert.h"
#include "cpu/runtime/parallel.h"

namespace polyops::cpu {

// Rotates every head of one tensor for one token. `src`/`dst` point at the
// token's row (dst may be src: each pair is read before it is written).
// cos/sin are this token's rotary_dim/2 values, already staged as float
// blocks [begin, begin + n) by the caller.
template <typename T>
inline void RotateBlock(const T* src, T* dst, const RotaryHeads& in,
                        const RotaryHeads& out, bool neox, int64_t half,
                        int64_t begin, int64_t n, const float* cos,
                        const float* sin) {
  float x1[kBlock], x2[kBlock], y1[kBlock], y2[kBlock];
  for (int64_t h = 0; h < in.heads; ++h) {
    const T* x = src + h * in.head_stride;
    T* y = dst + h * out.head_stride;
    if (neox) {
      LoadBlock(x + begin, 1, x1, n);
      LoadBlock(x + half + begin, 1, x2, n);
      for (int64_t i = 0; i < n; ++i) {
        y1[i] = x1[i] * cos[i] - x2[i] * sin[i];
        y2[i] = x2[i] * cos[i] + x1[i] * sin[i];
      }
      StoreBlock(y1, y + begin, 1, n);
      StoreBlock(y2, y + half + begin, 1, n);
    } else {
      LoadBlock(x + 2 * begin, 2, x1, n);
      LoadBlock(x + 2 * begin + 1, 2, x2, n);
      for (int64_t i = 0; i < n; ++i) {
        y1[i] = x1[i] * cos[i] - x2[i] * sin[i];
        y2[i] = x2[i] * cos[i] + x1[i] * sin[i];
      }
      StoreBlock(y1, y + 2 * begin, 2, n);
      StoreBlock(y2, y + 2 * begin + 1, 2, n);
    }
  }
}

// Copies each head's dims [rotary_dim, head_size) (the out-of-place tail).
template <typename T>
inline void CopyRotaryTail(const T* src, T* dst, const RotaryHeads& in,
                           const RotaryHeads& out, int64_t rotary_dim,
                           int64_t head_size) {
  if (rotary_dim == head_size) return;
  for (int64_t h = 0; h < in.heads; ++h) {
    std::memcpy(static_cast<void*>(dst + h * out.head_stride + rotary_dim),
                src + h * in.head_stride + rotary_dim,
                sizeof(T) * static_cast<size_t>(head_size - rotary_dim));
  }
}

// Rotates query and key (if any) for every token, OpenMP over tokens, in
// the widest ISA the CPU has (the float16/bfloat16 conversions dominate).
// table(t, &cos, &sin) gives token t's cos and sin rows (rotary_dim/2
// elements of type C each, contiguous).
template <typename T, typename C, typename TableFn>
void RotaryApply(const RotaryGeometry& g, const T* query, T* query_out,
                 const T* key, T* key_out, TableFn&& table) {
  const int64_t half = g.rotary_dim / 2;
  const int64_t heads = g.query.heads + (g.has_key ? g.key.heads : 0);
  const bool parallel = g.tokens * heads * g.head_size >= kParallelGrain;
  ParallelForIsa(g.tokens, parallel, [&](int64_t t) {
    const C* cos_row;
    const C* sin_row;
    table(t, &cos_row, &sin_row);
    const T* q = query + t * g.query.token_stride;
    T* qo = query_out + t * g.query_out.token_stride;
    const T* k = g.has_key ? key + t * g.key.token_stride : nullptr;
    T* ko = g.has_key ? key_out + t * g.key_out.token_stride : nullptr;
    float cos[kBlock], sin[kBlock];
    for (int64_t begin = 0; begin < half; begin += kBlock) {
      const int64_t n = std::min(kBlock, half - begin);
      LoadBlock(cos_row + begin, 1, cos, n);
      LoadBlock(sin_row + begin, 1, sin, n);
      RotateBlock(q, qo, g.query, g.query_out, g.neox, half, begin, n, cos,
                  sin);
      if (k) {
        RotateBlock(k, ko, g.key, g.key_out, g.neox, half, begin, n, cos, sin);
      }
    }
    if (!g.query_in_place) {
      CopyRotaryTail(q, qo, g.query, g.query_out, g.rotary_dim, g.head_size);
    }
    if (k && !g.key_in_place) {
      CopyRotaryTail(k, ko, g.key, g.key_out, g.rotary_dim, g.head_size);
    }
  });
}

}  // namespace polyops::cpu

#endif  // POLYOPS_CPU_KERNELS_ROTARY_ROTARY_H_
