// A branch-free float exp, so that row loops calling it vectorize: std::exp
// only does under -ffast-math, which this build does not use.
#ifndef POLYOPS_CPU_VECTOR_EXP_H_
#define POLYOPS_CPU_VECTOR_EXP_H_

#include <cstdint>
#include <cstring>

#include "cpu/convert.h"

namespace polyops::cpu {

// exp(x) to about 2 ulp (Cephes expf's range reduction and polynomial) with
// IEEE ends: exp(-inf) = 0, exp(inf) = inf, NaN stays NaN, so softmax gives
// a -inf logit weight 0 and silu(-inf) = -inf / inf is NaN, as torch has
// them. The clamps do it at no extra cost: below -88, n = -127 makes 2^n
// (the exponent bits) 0; above 89, n = 128 makes it inf. So results under
// about 1e-38 may flush to 0, and float32 overflows to inf from 88.38
// instead of 88.72.
POLYOPS_INLINE float VectorExp(float x) {
  const bool nan = x != x;
  x = x < -88.0f ? -88.0f : x;
  x = x > 89.0f ? 89.0f : x;
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
  return nan ? x + x : y * scale;
}

}  // namespace polyops::cpu

#endif  // POLYOPS_CPU_VECTOR_EXP_H_
