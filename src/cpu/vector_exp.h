// A branch-free float exp, so that row loops calling it vectorize: std::exp
// only does under -ffast-math, which this build does not use.
#ifndef POLYOPS_CPU_VECTOR_EXP_H_
#define POLYOPS_CPU_VECTOR_EXP_H_

#include <cstdint>
#include <cstring>
#include <limits>

#include "cpu/convert.h"

namespace polyops::cpu {

// exp(x) to about 2 ulp (Cephes expf's range reduction and polynomial) with
// IEEE ends: exp(-inf) = 0, exp(inf) = inf, NaN stays NaN, so softmax gives
// a -inf logit weight 0 and silu(-inf) = -inf / inf is NaN, as torch has
// them. Below -87.3 (a denormal result, under 1.3e-38) it flushes to 0,
// above 88.72 float32 overflows to inf, and (88.3, 88.72] gives exp(88.3)
// (the polynomial's 2^n needs n <= 127).
POLYOPS_INLINE float VectorExp(float x) {
  const bool nan = x != x;
  const bool underflow = x < -87.3f;
  const bool overflow = x > 88.72283905f;  // ln(FLT_MAX)
  x = underflow ? -87.3f : x;
  x = x > 88.3f ? 88.3f : x;
  // n = round(x / ln 2) by the 1.5 * 2**23 shifter (no rounding call).
  const float shifter = 12582912.0f;
  const float n = (x * 1.44269504088896341f + shifter) - shifter;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * (r * r) + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  const float result = underflow  ? 0.0f
                       : overflow ? std::numeric_limits<float>::infinity()
                                  : y * scale;
  return nan ? x + x : result;
}

}  // namespace polyops::cpu

#endif  // POLYOPS_CPU_VECTOR_EXP_H_
