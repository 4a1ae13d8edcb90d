// The GCC vector types of the CPU attention tile kernel and the lane
// primitives on them (exp, max, sum, transposition). Kept apart because
// every ISA variant must get the same bits from them.
#ifndef POLYOPS_CPU_KERNELS_ATTENTION_ATTENTION_VECTORS_H_
#define POLYOPS_CPU_KERNELS_ATTENTION_ATTENTION_VECTORS_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "core/data_type.h"
#include "cpu/runtime/convert.h"

namespace polyops::cpu {

// Sixteen floats as a GCC vector: locals of this type stay in registers
// (one zmm, two ymm or four xmm, whatever the variant's ISA has), which
// plain float arrays in a loop do not. Element-wise operations only, so
// every ISA variant computes the same bits.
typedef float Float16v __attribute__((vector_size(64)));
inline constexpr int64_t kLanes = 16;

// The vector the products (ScoreRows, the value sums) run in, per ISA
// variant: one register of it, 16 floats on AVX-512, 8 on AVX2 (a Float16v
// there spans 2 ymm and the register-blocked loops spilled), 4 on SSE2.
// Only which elements share a load or a broadcast depends on it, never an
// element's operations or their order, so every variant gives the same bits.
typedef float Float8v __attribute__((vector_size(32)));
typedef float Float4v __attribute__((vector_size(16)));

template <typename V>
inline constexpr int64_t kLanesOf = static_cast<int64_t>(sizeof(V) / 4);

// Accumulators the blocked products may keep in registers: 16 of the 32 zmm
// on AVX-512, 12 of the 16 ymm / xmm otherwise; the rest hold the loaded
// vectors, the broadcast and a product.
template <typename V>
inline constexpr int64_t kAccumulatorsOf = kLanesOf<V> == kLanes ? 16 : 12;

// The largest power of two <= n (n >= 1): blocks of whole vectors that
// divide a 64-key piece.
constexpr int64_t FloorPow2(int64_t n) {
  int64_t p = 1;
  while (2 * p <= n) p *= 2;
  return p;
}

template <typename V>
POLYOPS_INLINE V Load(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

template <typename V>
POLYOPS_INLINE void Store(float* p, V v) {
  std::memcpy(p, &v, sizeof(v));
}

// exp(x) for x <= 0 (and -inf), a vector (Float16v, or the Float8v /
// Float4v of the narrower variants: element-wise, so the same bits) at a
// time: 2^n * p(r) with x = n ln2 + r, |r| <= ln2 / 2, p a degree-6 Taylor
// polynomial (relative error below 2e-7); x < -87 gives 0 and NaN stays NaN
// (a NaN or +inf score must turn its row NaN, as softmax in IEEE arithmetic
// does).
template <typename V>
POLYOPS_INLINE V ExpNonPositive(V x) {
  using Int = decltype(x < x);
  const V floor_value = V{} - 87.0f;
  const Int keep = x >= floor_value;  // all ones where x >= -87
  const V clamped = keep ? x : floor_value;
  // Truncating x * log2(e) - 0.5 (<= 0) rounds x * log2(e) to nearest.
  const Int n =
      __builtin_convertvector(clamped * 1.44269504088896341f - 0.5f, Int);
  const V nf = __builtin_convertvector(n, V);
  // ln2 in two parts: n * 0.693359375 is exact for |n| <= 127.
  const V r = (clamped - nf * 0.693359375f) - nf * -2.12194440e-4f;
  V p = V{} + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const Int bits = (n + 127) << 23;
  V scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  const V result = p * scale;
  const Int nan = x != x;
  return keep ? result : nan ? x : V{};
}

// Largest lane of a vector (16, 8 or 4 floats), NaN lanes left out (-inf
// when all are NaN or -inf): a NaN score makes its row NaN through its exp,
// not through the max. Max is exact, so the reduction order cannot change
// the value (only the sign of a zero max, and x - (+0) and x - (-0) differ
// only for x = -0, whose exp is 1 either way).
template <typename V>
POLYOPS_INLINE float MaxOfLanes(V x) {
  using Int = decltype(x < x);
  constexpr int64_t kL = kLanesOf<V>;
  const V neg_inf = V{} - std::numeric_limits<float>::infinity();
  x = x == x ? x : neg_inf;
  // Constant shuffles (lane l ^ step), halving the live lanes each time.
  auto fold = [&x](Int swap) {
    const V y = __builtin_shuffle(x, swap);
    x = x > y ? x : y;
  };
  if constexpr (kL == 16) {
    fold(Int{8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7});
    fold(Int{4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11});
    fold(Int{2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13});
    fold(Int{1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14});
  } else if constexpr (kL == 8) {
    fold(Int{4, 5, 6, 7, 0, 1, 2, 3});
    fold(Int{2, 3, 0, 1, 6, 7, 4, 5});
    fold(Int{1, 0, 3, 2, 5, 4, 7, 6});
  } else {
    static_assert(kL == 4, "16, 8 or 4 lanes");
    fold(Int{2, 3, 0, 1});
    fold(Int{1, 0, 3, 2});
  }
  return x[0];
}

// Sum of 16 lanes in a fixed pairwise order (the same on every ISA).
POLYOPS_INLINE float SumOfLanes(Float16v x) {
  float lanes[kLanes];
  Store(lanes, x);
  for (int64_t width = kLanes / 2; width >= 1; width /= 2) {
    for (int64_t i = 0; i < width; ++i) lanes[i] += lanes[i + width];
  }
  return lanes[0];
}

// The lanes of rows i and i + kStep (kStep a power of two below kL) that
// make the new row i (kHigh false) or i + kStep (kHigh true) in a block
// swap: lane l of x, or kL + l of y. A constant built from the lane
// sequence, so __builtin_shuffle gets a constant mask and GCC emits plain
// lane shuffles (a mask built in a loop was not folded: it went through
// variable permutes and blends).
template <typename Int, int64_t kStep, bool kHigh, size_t... kLane>
constexpr Int SwapLanes(std::index_sequence<kLane...>) {
  constexpr int64_t kL = sizeof...(kLane);
  return Int{static_cast<int32_t>(
      (int64_t{kLane} & kStep) != 0
          ? (kHigh ? kL + int64_t{kLane} : kL + int64_t{kLane} - kStep)
          : (kHigh ? int64_t{kLane} + kStep : int64_t{kLane}))...};
}

// Transposes kL x kL floats held in kL vectors of kL lanes (16, 8 or 4):
// block swaps of kStep = kL / 2, ..., 2, 1 lanes between rows that far
// apart (two-source shuffles). Data movement only, so the variants agree.
template <typename V, int64_t kStep = kLanesOf<V> / 2>
POLYOPS_INLINE void TransposeSquare(V* m) {
  using Int = decltype(m[0] < m[0]);
  constexpr auto kLaneIndices = std::make_index_sequence<kLanesOf<V>>();
  constexpr Int kLow = SwapLanes<Int, kStep, false>(kLaneIndices);
  constexpr Int kHigh = SwapLanes<Int, kStep, true>(kLaneIndices);
#pragma GCC unroll 16
  for (int64_t i = 0; i < kLanesOf<V>; ++i) {
    if (i & kStep) continue;
    const V x = m[i], y = m[i + kStep];
    m[i] = __builtin_shuffle(x, y, kLow);
    m[i + kStep] = __builtin_shuffle(x, y, kHigh);
  }
  if constexpr (kStep > 1) TransposeSquare<V, kStep / 2>(m);
}

// kL values of row p from dim d0 as floats: float as is, bfloat16 widened
// in the vector (its float is its bits shifted up 16), so bfloat16 keys go
// from the cache into the transposition in one pass, not two.
template <typename V, typename T>
POLYOPS_INLINE V LoadKeys(const T* p) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    using Int = decltype(V{} < V{});
    typedef uint16_t Bits __attribute__((vector_size(sizeof(V) / 2)));
    Bits bits;
    std::memcpy(&bits, p, sizeof(bits));
    const Int wide = __builtin_convertvector(bits, Int) << 16;
    V v;
    std::memcpy(&v, &wide, sizeof(v));
    return v;
  } else {
    static_assert(std::is_same_v<T, float>, "float or staged rows");
    return Load<V>(p);
  }
}

}  // namespace polyops::cpu

#endif  // POLYOPS_CPU_KERNELS_ATTENTION_ATTENTION_VECTORS_H_
