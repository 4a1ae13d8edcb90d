// Branch-free float exps, so that row loops calling them vectorize: std::exp
// only does under -ffast-math, which this build does not use. VectorExp is
// silu's (cpu/silu.h), SoftmaxExp causal_softmax's.
#ifndef POLYOPS_CPU_VECTOR_EXP_H_
#define POLYOPS_CPU_VECTOR_EXP_H_

#include <cmath>
#include <cstdint>
#include <cstring>

#include "cpu/convert.h"

namespace polyops::cpu {

// exp(x) to about 2 ulp (Cephes expf's range reduction and polynomial) with
// IEEE ends: exp(-inf) = 0, exp(inf) = inf, NaN stays NaN, so
// silu(-inf) = -inf / inf is NaN and silu(inf) = inf, as torch has them. The
// clamps do it with no branch: the result is 2y * 2^(n-1), the scale's exponent
// bits n + 126, so below -87.6, n = -126 makes the scale 0 (results under
// about 1.6e-38 flush to 0), and at the upper clamp 89, n = 128 still gives a
// finite 2^127, so float32 overflows to inf exactly from ln(FLT_MAX) = 88.72.
// (Building 2^n itself makes n = 128 inf: exp overflowed from 88.38, and
// silu(g) for g in [-88.72, -88.38] was -0 instead of about -3e-37.) The
// reduction, the Horner steps and y = r^2 p + r are fused multiply-adds
// (std::fma: exact, so every ISA gives the same bits; vfmadd on AVX2 and
// AVX-512, a libm call on the x86-64 baseline), as in torch's CPU exp
// (Sleef expf u10: the same reduction, its own polynomial): the two then
// give the same float for 99.82% of float32 inputs (99.75% unfused), and
// silu, g / (1 + exp(-g)), matches F.silu for 99.93% of
// tests/test_silu_vllm.py's inputs (99.88% unfused), within 1 ulp for all
// but 0.007% (0.013%). A correctly rounded exp would match Sleef's for only
// 99.03% of them (probe against Sleef_expf16_u10, every 61st float32 in
// [1e-30, 100] of either sign).
POLYOPS_INLINE float VectorExp(float x) {
  const bool nan = x != x;
  x = x < -87.6f ? -87.6f : x;
  x = x > 89.0f ? 89.0f : x;
  // n = round(x / ln 2) by the 1.5 * 2**23 shifter (no rounding call).
  const float shifter = 12582912.0f;
  const float n = std::fma(x, 1.44269504088896341f, shifter) - shifter;
  float r = std::fma(n, -0.693359375f, x);
  r = std::fma(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = std::fma(p, r, 1.3981999507e-3f);
  p = std::fma(p, r, 8.3334519073e-3f);
  p = std::fma(p, r, 4.1665795894e-2f);
  p = std::fma(p, r, 1.6666665459e-1f);
  p = std::fma(p, r, 5.0000001201e-1f);
  const float y = std::fma(r * r, p, r) + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 126) << 23;
  float half_scale;
  std::memcpy(&half_scale, &bits, sizeof(half_scale));
  return nan ? x + x : (y + y) * half_scale;
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
  // n from the shifter's low mantissa bits (no float-to-int conversion, so
  // NaN is no undefined behaviour); 2^n in float64 is exact for n >= -150.
  uint32_t shifted_bits, shifter_bits;
  std::memcpy(&shifted_bits, &shifted, sizeof(shifted_bits));
  std::memcpy(&shifter_bits, &shifter, sizeof(shifter_bits));
  const uint64_t exponent = static_cast<uint64_t>(
      static_cast<int64_t>(static_cast<int32_t>(shifted_bits - shifter_bits)) +
      1023);
  const uint64_t scale_bits = (exponent & 0x7ffu) << 52;
  double scale;
  std::memcpy(&scale, &scale_bits, sizeof(scale));
  const float result = static_cast<float>(static_cast<double>(y) * scale);
  return nan ? t : result;
}

}  // namespace polyops::cpu

#endif  // POLYOPS_CPU_VECTOR_EXP_H_
