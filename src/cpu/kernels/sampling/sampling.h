// The exactly specified arithmetic of topk_topp_sampling (see
// base/topk_topp_sampling.h): every backend must evaluate these same rounded
// float32 operations, in this order, to return the same token ids.
#ifndef POLYOPS_CPU_KERNELS_SAMPLING_SAMPLING_H_
#define POLYOPS_CPU_KERNELS_SAMPLING_SAMPLING_H_

#include <cmath>
#include <cstdint>
#include <cstring>

namespace polyops::cpu {

// Cephes-style expf for d <= 0 built from + and * only: unlike std::exp, its
// result does not depend on the math library. Relies on -ffp-contract=off
// (the build's flag) so that no multiply-add gets fused.
inline float SamplingExp(float d) {
  if (!(d >= -80.0f)) return 0.0f;  // also -inf; exp(-80) ~ 1.8e-35
  const float n = std::floor(d * 0x1.715476p+0f + 0.5f);
  const float r = (d - n * 0x1.63p-1f) - n * -0x1.bd0106p-13f;
  float q = 0x1.a0d2cep-13f;
  q = q * r + 0x1.6e879cp-10f;
  q = q * r + 0x1.11121p-7f;
  q = q * r + 0x1.555382p-5f;
  q = q * r + 0x1.555554p-3f;
  q = q * r + 0x1.0p-1f;
  const float y = (q * (r * r) + r) + 1.0f;
  // n is in [-116, 0], so 2**n is a normal float built exactly from its bits
  // and y * 2**n (y in about [0.7, 1.42]) stays normal: no subnormal rounding.
  const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127)
                        << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return y * scale;
}

// splitmix64 keyed by (seed, row): independent, reproducible per-row draws
// with no generator state to carry between calls.
inline float SplitMix64Uniform(int64_t seed, int64_t row) {
  uint64_t z = static_cast<uint64_t>(seed) +
               (static_cast<uint64_t>(row) + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * 0x1.0p-24f;
}

// A 32-bit key whose unsigned ascending order is the float's DESCENDING
// order, with -0.0 equal to +0.0. NaN is excluded by the caller.
inline uint32_t DescendingKey(float x) {
  uint32_t bits;
  if (x == 0.0f) x = 0.0f;
  std::memcpy(&bits, &x, sizeof(bits));
  const uint32_t ascending = (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
  return ~ascending;
}

inline float FromDescendingKey(uint32_t key) {
  const uint32_t ascending = ~key;
  const uint32_t bits =
      (ascending & 0x80000000u) ? ascending & 0x7fffffffu : ~ascending;
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}

}  // namespace polyops::cpu

#endif  // POLYOPS_CPU_KERNELS_SAMPLING_SAMPLING_H_
