// topk_topp_sampling on the device (the kernel of the CUDA slot
// cuda/topk_topp_sampling/radix.cuh): the exactly specified float32
// arithmetic of src/cpu/kernels/sampling/sampling.h -- the same rounded
// operations in the same order, so the slot returns the CPU slot's token ids
// bit for bit -- and the per-row select / compaction / sort. Every float
// operation is an explicit round-to-nearest intrinsic (__fadd_rn, __fmul_rn),
// which nvcc never contracts into a fused multiply-add, whatever -fmad says.
#ifndef POLYOPS_CUDA_KERNELS_SAMPLING_SAMPLING_CUH_
#define POLYOPS_CUDA_KERNELS_SAMPLING_SAMPLING_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/runtime/common.cuh"

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

constexpr int kSamplingThreads = 512;
constexpr int kSamplingWarps = kSamplingThreads / 32;
// Weights staged per step of the sequential sums (16 KiB of shared memory).
constexpr int kSamplingChunk = 4096;

// The per-row arguments, each a scalar for the batch or a strided tensor.
struct SamplingArgs {
  int64_t batch;
  int64_t vocab;
  int64_t row_stride;
  const void* top_k;  // int32 or int64 [B], or null: top_k_scalar
  bool top_k_int64;
  int64_t top_k_stride;
  int64_t top_k_scalar;  // in [1, V]
  const float* top_p;    // float32 [B], or null: top_p_scalar
  int64_t top_p_stride;
  float top_p_scalar;
  const float* uniform;  // float32 [B], or null: SplitMix64Uniform(seed, b)
  int64_t uniform_stride;
  int64_t seed;
  void* out;  // int64 [B], or int32 [B] when out_int32
  bool out_int32;
};

// Row b's token id (or the -1 marker); every id fits int32 (V <= INT32_MAX).
__device__ __forceinline__ void StoreToken(const SamplingArgs& args, int64_t b,
                                           int64_t token) {
  if (args.out_int32) {
    static_cast<int32_t*>(args.out)[b] = static_cast<int32_t>(token);
  } else {
    static_cast<int64_t*>(args.out)[b] = token;
  }
}

struct SamplingShared {
  uint32_t digits[256];  // histogram, then each digit's next output slot
  uint32_t tile_digits[256];
  uint32_t warp_digits[kSamplingWarps][256];
  uint32_t warp_counts[kSamplingWarps];
  uint32_t scalar[2];
  uint32_t reduce[32];
  float chunk[kSamplingChunk];
};

__device__ __forceinline__ float SamplingValue(float value) {
  return isnan(value) ? -INFINITY : value;
}

// Step 3's weight of a token with logit `value` in a row whose max is m.
__device__ __forceinline__ float SamplingWeight(float value, float m) {
  if (m == INFINITY) return value == INFINITY ? 1.0f : 0.0f;
  if (m == -INFINITY) return 1.0f;
  return SamplingExp(__fsub_rn(value, m));
}

__device__ __forceinline__ uint32_t BlockMinKey(uint32_t key,
                                                SamplingShared& shared) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    key = min(key, __shfl_xor_sync(0xffffffffu, key, offset));
  }
  __syncthreads();
  if ((threadIdx.x & 31) == 0) shared.reduce[threadIdx.x >> 5] = key;
  __syncthreads();
  key = 0xffffffffu;
  for (int w = 0; w < kSamplingWarps; ++w) key = min(key, shared.reduce[w]);
  return key;
}

// The k-th smallest (1-based) 32-bit key of the row: four passes of an
// MSB-first radix select, one byte per pass, counted in shared memory.
template <typename T>
__device__ uint32_t SelectKthKey(const T* x, int64_t vocab, int64_t k,
                                 SamplingShared& shared) {
  uint32_t prefix = 0;
  uint32_t prefix_mask = 0;
  uint32_t rank = static_cast<uint32_t>(k);
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int d = threadIdx.x; d < 256; d += blockDim.x) shared.digits[d] = 0;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      const uint32_t key = DescendingKey(SamplingValue(ToFloat(x[i])));
      if ((key & prefix_mask) == prefix) {
        atomicAdd(&shared.digits[(key >> shift) & 0xffu], 1u);
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      uint32_t below = 0;
      uint32_t digit = 255;
      for (uint32_t d = 0; d < 256; ++d) {
        if (below + shared.digits[d] >= rank) {
          digit = d;
          break;
        }
        below += shared.digits[d];
      }
      shared.scalar[0] = digit;
      shared.scalar[1] = rank - below;
    }
    __syncthreads();
    prefix |= shared.scalar[0] << shift;
    prefix_mask |= 0xffu << shift;
    rank = shared.scalar[1];
  }
  return prefix;
}

// Writes (key << 32 | id) of every token with key <= kth and a nonzero
// weight to `keys`, in id order (a stable compaction); returns the count.
// The zero-weight tokens dropped here sort after every kept one and add
// nothing to the sums, so the sampled token never is one of them.
template <typename T>
__device__ uint32_t GatherCandidates(const T* x, int64_t vocab, uint32_t kth,
                                     float m, uint64_t* keys,
                                     SamplingShared& shared) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  uint32_t count = 0;
  for (int64_t start = 0; start < vocab; start += blockDim.x) {
    const int64_t i = start + threadIdx.x;
    bool keep = false;
    uint32_t key = 0;
    if (i < vocab) {
      const float value = SamplingValue(ToFloat(x[i]));
      key = DescendingKey(value);
      keep = key <= kth && SamplingWeight(FromDescendingKey(key), m) != 0.0f;
    }
    const uint32_t ballot = __ballot_sync(0xffffffffu, keep);
    if (lane == 0) shared.warp_counts[warp] = __popc(ballot);
    __syncthreads();
    uint32_t before = count;
    for (int w = 0; w < warp; ++w) before += shared.warp_counts[w];
    uint32_t total = count;
    for (int w = 0; w < kSamplingWarps; ++w) total += shared.warp_counts[w];
    if (keep) {
      const uint32_t slot = before + __popc(ballot & ((1u << lane) - 1u));
      keys[slot] =
          (static_cast<uint64_t>(key) << 32) | static_cast<uint64_t>(i);
    }
    count = total;
    __syncthreads();  // warp_counts is rewritten by the next tile
  }
  return count;
}

// Sorts keys[0, n) ascending by their high 32 bits, stably (LSD radix, one
// byte per pass, skipping bytes every key shares), through `spare`; returns
// the buffer holding the result. Stability: within a tile, a key's slot is
// its digit's count in earlier tiles, earlier warps and earlier lanes.
__device__ uint64_t* RadixSortHighWord(uint64_t* keys, uint64_t* spare,
                                       uint32_t n, SamplingShared& shared) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  uint64_t* src = keys;
  uint64_t* dst = spare;
  for (int shift = 32; shift < 64; shift += 8) {
    for (int d = threadIdx.x; d < 256; d += blockDim.x) shared.digits[d] = 0;
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
      atomicAdd(&shared.digits[(src[i] >> shift) & 0xffu], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      uint32_t offset = 0;
      bool shared_digit = false;
      for (int d = 0; d < 256; ++d) {
        const uint32_t size = shared.digits[d];
        shared_digit = shared_digit || size == n;
        shared.digits[d] = offset;
        offset += size;
      }
      shared.scalar[0] = shared_digit ? 1u : 0u;
    }
    __syncthreads();
    if (shared.scalar[0] != 0) continue;  // uniform across the block
    for (uint32_t start = 0; start < n; start += blockDim.x) {
      const uint32_t i = start + threadIdx.x;
      const bool valid = i < n;
      const uint64_t key = valid ? src[i] : 0;
      // Lanes past the end get digit 256, a group of their own.
      const uint32_t digit =
          valid ? static_cast<uint32_t>((key >> shift) & 0xffu) : 256u;
      const uint32_t peers = __match_any_sync(0xffffffffu, digit);
      const uint32_t lane_rank = __popc(peers & ((1u << lane) - 1u));
      for (int j = threadIdx.x; j < kSamplingWarps * 256; j += blockDim.x) {
        shared.warp_digits[j / 256][j % 256] = 0;
      }
      __syncthreads();
      if (valid && lane == __ffs(peers) - 1) {
        shared.warp_digits[warp][digit] = __popc(peers);
      }
      __syncthreads();
      // Exclusive prefix over the warps, per digit.
      for (int d = threadIdx.x; d < 256; d += blockDim.x) {
        uint32_t running = 0;
        for (int w = 0; w < kSamplingWarps; ++w) {
          const uint32_t size = shared.warp_digits[w][d];
          shared.warp_digits[w][d] = running;
          running += size;
        }
        shared.tile_digits[d] = running;
      }
      __syncthreads();
      if (valid) {
        dst[shared.digits[digit] + shared.warp_digits[warp][digit] +
            lane_rank] = key;
      }
      __syncthreads();
      for (int d = threadIdx.x; d < 256; d += blockDim.x) {
        shared.digits[d] += shared.tile_digits[d];
      }
      __syncthreads();
    }
    uint64_t* swap = src;
    src = dst;
    dst = swap;
  }
  return src;
}

// Calls visit(j, w_j) in thread 0 for j = 0, 1, ... < n in order until it
// returns true, the weights computed by the whole block into shared memory
// a chunk at a time (the sequential float32 sums cannot be split, but their
// inputs can be staged). Every thread of the block must call it.
template <typename WeightAt, typename Visit>
__device__ void VisitInOrder(uint32_t n, const WeightAt& weight_at,
                             SamplingShared& shared, Visit&& visit) {
  for (uint32_t start = 0; start < n; start += kSamplingChunk) {
    const uint32_t size = min(static_cast<uint32_t>(kSamplingChunk), n - start);
    for (uint32_t j = threadIdx.x; j < size; j += blockDim.x) {
      shared.chunk[j] = weight_at(start + j);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      bool stop = false;
      for (uint32_t j = 0; j < size && !stop; ++j) {
        stop = visit(start + j, shared.chunk[j]);
      }
      shared.scalar[0] = stop ? 1u : 0u;
    }
    __syncthreads();
    // Read before thread 0 can rewrite it: that needs the next chunk's
    // barrier, which every thread reaches only after this read.
    if (shared.scalar[0] != 0) break;
  }
}

// One block per row (grid-strided over the batch), `scratch` holding 2 * V
// uint64 per block. Steps as in base/topk_topp_sampling.h; the three
// order-sensitive float32 sums run sequentially in thread 0, the same
// operations in the same order as the CPU slot.
template <typename T>
__global__ void __launch_bounds__(kSamplingThreads)
    SampleRows(const T* logits, SamplingArgs args, uint64_t* scratch) {
  __shared__ SamplingShared shared;
  uint64_t* keys = scratch + blockIdx.x * 2 * args.vocab;
  uint64_t* spare = keys + args.vocab;
  for (int64_t b = blockIdx.x; b < args.batch; b += gridDim.x) {
    const T* x = logits + b * args.row_stride;
    int64_t k = args.top_k_scalar;
    if (args.top_k != nullptr) {
      const int64_t at = b * args.top_k_stride;
      k = args.top_k_int64 ? static_cast<const int64_t*>(args.top_k)[at]
                           : static_cast<const int32_t*>(args.top_k)[at];
      if (k <= 0 || k >= args.vocab) k = args.vocab;
    }
    const float p = args.top_p != nullptr ? args.top_p[b * args.top_p_stride]
                                          : args.top_p_scalar;
    const float u = args.uniform != nullptr
                        ? args.uniform[b * args.uniform_stride]
                        : SplitMix64Uniform(args.seed, b);
    // Out-of-range values cannot raise from the device without a host
    // synchronization: the row gets the impossible token -1 instead.
    if (!(p > 0.0f && p <= 1.0f) || !(u >= 0.0f && u < 1.0f)) {
      if (threadIdx.x == 0) StoreToken(args, b, -1);
      continue;  // uniform across the block
    }

    uint32_t min_key = 0xffffffffu;
    for (int64_t i = threadIdx.x; i < args.vocab; i += blockDim.x) {
      min_key = min(min_key, DescendingKey(SamplingValue(ToFloat(x[i]))));
    }
    min_key = BlockMinKey(min_key, shared);
    const float m = FromDescendingKey(min_key);
    const uint32_t kth =
        k < args.vocab ? SelectKthKey(x, args.vocab, k, shared) : 0xffffffffu;
    const uint32_t n = GatherCandidates(x, args.vocab, kth, m, keys, shared);
    const uint64_t* sorted = RadixSortHighWord(keys, spare, n, shared);
    // n >= 1: the row's max has weight 1 and a key <= kth.
    const auto weight_at = [&](uint32_t j) {
      return SamplingWeight(
          FromDescendingKey(static_cast<uint32_t>(sorted[j] >> 32)), m);
    };
    // The three sums of steps 4-6, in thread 0 only (the other threads'
    // copies of these variables are unused).
    float total = 0.0f;
    VisitInOrder(n, weight_at, shared, [&](uint32_t, float w) {
      total = __fadd_rn(total, w);
      return false;
    });
    uint32_t prefix = n;
    float prefix_mass = total;
    if (p < 1.0f) {
      const float threshold = __fmul_rn(p, total);
      float cumulative = 0.0f;
      VisitInOrder(n, weight_at, shared, [&](uint32_t j, float w) {
        cumulative = __fadd_rn(cumulative, w);
        if (cumulative < threshold) return false;
        prefix = j + 1;
        prefix_mass = cumulative;
        return true;
      });
    }
    // Block-uniform again: prefix only bounds the visit in thread 0.
    const float target = __fmul_rn(u, prefix_mass);
    float cumulative = 0.0f;
    uint32_t chosen = 0;
    bool found = false;
    VisitInOrder(n, weight_at, shared, [&](uint32_t j, float w) {
      if (j >= prefix) return true;
      cumulative = __fadd_rn(cumulative, w);
      chosen = j;
      found = cumulative > target || cumulative == prefix_mass;
      return found;
    });
    if (threadIdx.x == 0) {
      // The visit always stops at the prefix's last token at the latest
      // (there C == prefix_mass); `chosen` is prefix - 1 otherwise anyway.
      if (!found) chosen = prefix - 1;
      // n == 0 cannot happen (see above); the guard keeps the read in bounds.
      StoreToken(
          args, b,
          n == 0 ? -1 : static_cast<int64_t>(sorted[chosen] & 0xffffffffull));
    }
    __syncthreads();  // the next row reuses keys, spare and shared
  }
}

}  // namespace polyops::cuda

#endif  // POLYOPS_CUDA_KERNELS_SAMPLING_SAMPLING_CUH_
