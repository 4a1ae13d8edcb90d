// topk_topp_sampling's exactly specified float32 arithmetic on the device:
// the same rounded operations, in the same order, as src/cpu/sampling.h, so
// the CUDA slot returns the CPU slot's token ids bit for bit. Every
// operation is an explicit round-to-nearest intrinsic (__fadd_rn,
// __fmul_rn), which nvcc never contracts into a fused multiply-add,
// whatever -fmad says.
#ifndef POLYOPS_CUDA_SAMPLING_CUH_
#define POLYOPS_CUDA_SAMPLING_CUH_

#include <cuda_runtime.h>

#include <cstdint>

namespace polyops::cuda {

// Cephes-style expf for d <= 0 (base/topk_topp_sampling.h, "Exp").
__device__ __forceinline__ float SamplingExp(float d) {
  if (!(d >= -80.0f)) return 0.0f;  // also -inf
  const float n = floorf(__fadd_rn(__fmul_rn(d, 0x1.715476p+0f), 0.5f));
  const float r = __fsub_rn(__fsub_rn(d, __fmul_rn(n, 0x1.63p-1f)),
                            __fmul_rn(n, -0x1.bd0106p-13f));
  float q = 0x1.a0d2cep-13f;
  q = __fadd_rn(__fmul_rn(q, r), 0x1.6e879cp-10f);
  q = __fadd_rn(__fmul_rn(q, r), 0x1.11121p-7f);
  q = __fadd_rn(__fmul_rn(q, r), 0x1.555382p-5f);
  q = __fadd_rn(__fmul_rn(q, r), 0x1.555554p-3f);
  q = __fadd_rn(__fmul_rn(q, r), 0x1.0p-1f);
  const float y = __fadd_rn(__fadd_rn(__fmul_rn(q, __fmul_rn(r, r)), r), 1.0f);
  // n in [-116, 0]: 2**n is a normal float built exactly from its bits.
  const float scale = __uint_as_float(
      static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23);
  return __fmul_rn(y, scale);
}

// splitmix64 keyed by (seed, row), as cpu::SplitMix64Uniform.
__device__ __forceinline__ float SplitMix64Uniform(int64_t seed, int64_t row) {
  uint64_t z = static_cast<uint64_t>(seed) +
               (static_cast<uint64_t>(row) + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  // z >> 40 < 2**24 converts exactly; the scaling by 2**-24 is exact.
  return __fmul_rn(static_cast<float>(z >> 40), 0x1.0p-24f);
}

// A 32-bit key whose unsigned ascending order is the float's descending
// order, -0.0 equal to +0.0 (cpu::DescendingKey). NaN is excluded by the
// caller.
__device__ __forceinline__ uint32_t DescendingKey(float x) {
  if (x == 0.0f) x = 0.0f;
  const uint32_t bits = __float_as_uint(x);
  const uint32_t ascending = (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
  return ~ascending;
}

__device__ __forceinline__ float FromDescendingKey(uint32_t key) {
  const uint32_t ascending = ~key;
  const uint32_t bits =
      (ascending & 0x80000000u) ? ascending & 0x7fffffffu : ~ascending;
  return __uint_as_float(bits);
}

}  // namespace polyops::cuda

#endif  // POLYOPS_CUDA_SAMPLING_CUH_
