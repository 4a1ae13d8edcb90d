// Branch-free float exps, so that row loops calling them vectorize: std::exp
// only does under -ffast-math, which this build does not use. VectorExp is
// silu's (cpu/kernels/elementwise/silu.h), SoftmaxExp causal_softmax's.
#ifndef POLYOPS_CPU_KERNELS_ELEMENTWISE_VECTOR_EXP_H_
#define POLYOPS_CPU_KERNELS_ELEMENTWISE_VECTOR_EXP_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "cpu/runtime/convert.h"

namespace polyops::cpu {

// exp(x) as the same sequence of float32 operations as torch's CPU exp
// (Sleef's expf u10 with fused multiply-adds, what ATen's Vectorized<float>
// exp and therefore F.silu call on AVX2 and AVX-512), so silu,
// g / (1 + exp(-g)), gives F.silu's bits: tests/cpu/test_silu_vllm.py finds no
// difference over 36 million inputs. Written from the algorithm, not the
// source: q = rint(x * log2(e)) (the product rounded first, then rounded to
// an integer by the 1.5 * 2^23 shifter), s = x - q ln2 with ln2 split in two
// (fused), a degree-5 polynomial in s (fused Horner steps), 1 + (s^2 p + s),
// then 2^q applied as two exact power-of-two factors so that results down
// to the subnormals round once. IEEE ends: exp(x) = 0 below -104, inf above
// 100 (and by overflow from ln(FLT_MAX) = 88.72), NaN stays NaN, so
// silu(-inf) = -inf / inf is NaN and silu(inf) = inf, as torch has them.
// std::fma is exact, so every ISA variant gives the same bits (vfmadd on
// AVX2 and AVX-512, a libm call on the x86-64 baseline); the clamp keeps q
// in int32 range without a branch.
POLYOPS_INLINE float VectorExp(float x) {
  const bool nan = x != x;
  const float c = x < -104.0f ? -104.0f : (x > 100.0f ? 100.0f : x);
  const float shifter = 12582912.0f;  // 1.5 * 2^23
  const float shifted = c * 1.44269504088896341f + shifter;
  const float q = shifted - shifter;
  float s = std::fma(q, -0.693145751953125f, c);
  s = std::fma(q, -1.428606765330187045e-06f, s);
  float p = 0.000198527617612853646278381f;
  p = std::fma(p, s, 0.00139304355252534151077271f);
  p = std::fma(p, s, 0.00833336077630519866943359f);
  p = std::fma(p, s, 0.0416664853692054748535156f);
  p = std::fma(p, s, 0.166666671633720397949219f);
  p = std::fma(p, s, 0.5f);
  const float y = 1.0f + std::fma(s * s, p, s);
  // q from the shifter's low mantissa bits: no float-to-int conversion, so
  // a NaN x is no undefined behaviour. |q| <= 150, so each half fits 2^e.
  uint32_t shifted_bits, shifter_bits;
  std::memcpy(&shifted_bits, &shifted, sizeof(shifted_bits));
  std::memcpy(&shifter_bits, &shifter, sizeof(shifter_bits));
  const int32_t n = static_cast<int32_t>(shifted_bits - shifter_bits);
  const uint32_t low_bits = static_cast<uint32_t>((n >> 1) + 127) << 23;
  const uint32_t high_bits = static_cast<uint32_t>(n - (n >> 1) + 127) << 23;
  float low, high;
  std::memcpy(&low, &low_bits, sizeof(low));
  std::memcpy(&high, &high_bits, sizeof(high));
  float result = y * low * high;
  result = x < -104.0f ? 0.0f : result;
  result = x > 100.0f ? std::numeric_limits<float>::infinity() : result;
  return nan ? x + x : result;
}

// exp(t) for softmax, where t = x - max(x) is <= 0 or NaN (a NaN or +inf in
// the row): cheaper than VectorExp, to within 1.5e-7 relative (a degree-5
// polynomial fitted here for relative error, 5 fused steps), no upper clamp,
// results below FLT_MIN rounded as IEEE subnormals and exactly 0 below about
// -103.97 (so a -inf score weighs exactly 0). It is the scalar form of the
// AVX-512 SoftmaxExp512 (cpu/causal_softmax/omp.h), to the bit: n = rint(t
// log2 e) (the shifter's round to nearest even is VRNDSCALEPS's), and the
// final y * 2^n, one float64 product rounded once, is what VSCALEFPS rounds.
inline constexpr float kSoftmaxExpLow = -104.0f;
inline constexpr float kSoftmaxExpLog2e = 1.44269504088896341f;
// ln 2 = kSoftmaxExpLn2High + kSoftmaxExpLn2Low; the high part has 9 bits,
// so n * high is exact for every n here.
inline constexpr float kSoftmaxExpLn2High = 0.693359375f;
inline constexpr float kSoftmaxExpLn2Low = -2.12194440e-4f;
// exp(r) ~ 1 + r (c1 + r (c2 + r (c3 + r (c4 + r c5)))) on |r| <= ln(2) / 2.
inline constexpr float kSoftmaxExpC1 = 0.9999997019767761f;
inline constexpr float kSoftmaxExpC2 = 0.4999914765357971f;
inline constexpr float kSoftmaxExpC3 = 0.1666763871908188f;
inline constexpr float kSoftmaxExpC4 = 0.04189816489815712f;
inline constexpr float kSoftmaxExpC5 = 0.008290263824164867f;

// y * 2^n rounded once, n = shifted - shifter read from the shifter's low
// mantissa bits (no float-to-int conversion, so NaN is no undefined
// behaviour); 2^n in float64 is exact for n >= -150, and the one rounding
// of the float64 product is what VSCALEFPS does.
POLYOPS_INLINE float TimesPowerOfTwo(float y, float shifted, float shifter) {
  uint32_t shifted_bits, shifter_bits;
  std::memcpy(&shifted_bits, &shifted, sizeof(shifted_bits));
  std::memcpy(&shifter_bits, &shifter, sizeof(shifter_bits));
  const uint64_t exponent = static_cast<uint64_t>(
      static_cast<int64_t>(static_cast<int32_t>(shifted_bits - shifter_bits)) +
      1023);
  const uint64_t scale_bits = (exponent & 0x7ffu) << 52;
  double scale;
  std::memcpy(&scale, &scale_bits, sizeof(scale));
  return static_cast<float>(static_cast<double>(y) * scale);
}

POLYOPS_INLINE float SoftmaxExp(float t) {
  const bool nan = t != t;
  const float c = t < kSoftmaxExpLow ? kSoftmaxExpLow : t;
  const float shifter = 12582912.0f;  // 1.5 * 2**23
  const float shifted = c * kSoftmaxExpLog2e + shifter;
  const float n = shifted - shifter;
  float r = std::fma(n, -kSoftmaxExpLn2High, c);
  r = std::fma(n, -kSoftmaxExpLn2Low, r);
  float p = kSoftmaxExpC5;
  p = std::fma(p, r, kSoftmaxExpC4);
  p = std::fma(p, r, kSoftmaxExpC3);
  p = std::fma(p, r, kSoftmaxExpC2);
  p = std::fma(p, r, kSoftmaxExpC1);
  const float y = std::fma(p, r, 1.0f);
  const float result = TimesPowerOfTwo(y, shifted, shifter);
  return nan ? t : result;
}

// causal_softmax's exp for float16 and bfloat16 rows: exp(t) = 2^y with
// y = t log2 e rounded once, so no Cody-Waite reduction is needed: n =
// rint(y), f = y - n (exact, |f| <= 1/2), 2^f by a degree-5 polynomial
// fitted here for relative error (1.7e-7), then 2^f * 2^n rounded once.
// The rounding of y adds a relative error of at most |t| * 6e-8 (6e-7 at
// t = -10), far below the output's half ulp (2.4e-4 in float16, 2e-3 in
// bfloat16), and it takes 6 multiplies or FMAs per exp against SoftmaxExp's
// 8, the AVX-512 loop's bottleneck (docs/backends/cpu_softmax.md). y is clamped
// at -151, where 2^y rounds to 0, so a -inf score weighs exactly 0. Scalar form
// of SoftmaxExp2Of512 (cpu/causal_softmax/omp.h), to the bit.
inline constexpr float kSoftmaxExp2Low = -151.0f;
// 2^f ~ 1 + f (c1 + f (c2 + f (c3 + f (c4 + f c5)))) on |f| <= 1/2.
inline constexpr float kSoftmaxExp2C1 = 0.693147f;
inline constexpr float kSoftmaxExp2C2 = 0.24022242f;
inline constexpr float kSoftmaxExp2C3 = 0.055507336f;
inline constexpr float kSoftmaxExp2C4 = 0.009671513f;
inline constexpr float kSoftmaxExp2C5 = 0.0013264727f;

POLYOPS_INLINE float SoftmaxExp2Of(float t) {
  const float y = t * kSoftmaxExpLog2e;
  const bool nan = y != y;
  const float c = y < kSoftmaxExp2Low ? kSoftmaxExp2Low : y;
  const float shifter = 12582912.0f;  // 1.5 * 2**23
  const float shifted = c + shifter;
  const float n = shifted - shifter;
  const float f = c - n;
  float p = kSoftmaxExp2C5;
  p = std::fma(p, f, kSoftmaxExp2C4);
  p = std::fma(p, f, kSoftmaxExp2C3);
  p = std::fma(p, f, kSoftmaxExp2C2);
  p = std::fma(p, f, kSoftmaxExp2C1);
  const float r = std::fma(p, f, 1.0f);
  const float result = TimesPowerOfTwo(r, shifted, shifter);
  return nan ? y : result;
}

}  // namespace polyops::cpu

#endif  // POLYOPS_CPU_KERNELS_ELEMENTWISE_VECTOR_EXP_H_
