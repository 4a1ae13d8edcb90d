// A host stand-in for <cuda_runtime.h>, enough to run src/cuda/kernels/sampling/sampling.cuh's
// kernel on a CPU (tests/cuda/test_cuda_sampling_emulated.py): one block of
// std::threads per launch, __syncthreads as a std::barrier, warp
// collectives (shuffle, ballot, match_any) through per-warp slots and
// barriers, the _rn intrinsics as plain float32 operations (built with
// -ffp-contract=off). It checks the kernel's logic -- indices, barriers,
// stability of the sort, the order of the sums -- not nvcc or a GPU.
#ifndef POLYOPS_TESTS_CUDA_EMULATION_CUDA_RUNTIME_H_
#define POLYOPS_TESTS_CUDA_EMULATION_CUDA_RUNTIME_H_

#include <math.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#define __device__
#define __global__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(threads)
#define __shared__ static  // one block runs at a time

struct EmulatedDim3 {
  unsigned x = 0;
};
inline thread_local EmulatedDim3 threadIdx;
inline thread_local EmulatedDim3 blockIdx;
inline EmulatedDim3 blockDim;
inline EmulatedDim3 gridDim;

struct EmulatedBlock {
  std::unique_ptr<std::barrier<>> block;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  uint64_t lanes[32][32];  // [warp][lane]
};
inline EmulatedBlock* emulated_block = nullptr;

inline void __syncthreads() { emulated_block->block->arrive_and_wait(); }

namespace emulation {

inline int Lane() { return threadIdx.x & 31; }
inline int Warp() { return threadIdx.x >> 5; }
inline void WarpBarrier() { emulated_block->warps[Warp()]->arrive_and_wait(); }

template <typename T>
void Put(T value) {
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  emulated_block->lanes[Warp()][Lane()] = bits;
}

template <typename T>
T Get(int lane) {
  T value;
  const uint64_t bits = emulated_block->lanes[Warp()][lane];
  std::memcpy(&value, &bits, sizeof(T));
  return value;
}

// Every lane publishes `value`, then reads what `read` computes from the
// warp's values; the second barrier keeps the slots until all have read.
template <typename T, typename Read>
auto Exchange(T value, Read read) {
  Put(value);
  WarpBarrier();
  auto result = read();
  WarpBarrier();
  return result;
}

}  // namespace emulation

template <typename T>
T __shfl_xor_sync(unsigned, T value, int offset) {
  return emulation::Exchange(
      value, [&] { return emulation::Get<T>(emulation::Lane() ^ offset); });
}

inline unsigned __ballot_sync(unsigned, bool predicate) {
  return emulation::Exchange(static_cast<uint32_t>(predicate), [] {
    unsigned mask = 0;
    for (int lane = 0; lane < 32; ++lane) {
      if (emulation::Get<uint32_t>(lane) != 0) mask |= 1u << lane;
    }
    return mask;
  });
}

inline unsigned __match_any_sync(unsigned, unsigned value) {
  return emulation::Exchange(value, [&] {
    unsigned mask = 0;
    for (int lane = 0; lane < 32; ++lane) {
      if (emulation::Get<uint32_t>(lane) == value) mask |= 1u << lane;
    }
    return mask;
  });
}

inline int __popc(unsigned value) { return __builtin_popcount(value); }
inline int __ffs(unsigned value) { return __builtin_ffs(value); }
inline unsigned atomicAdd(unsigned* address, unsigned value) {
  return std::atomic_ref<unsigned>(*address).fetch_add(value);
}
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline unsigned __float_as_uint(float x) {
  unsigned bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
}
inline float __uint_as_float(unsigned bits) {
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}
using std::isnan;
using std::min;

// kernel<<<grid, threads>>>(): the blocks one after another, each as
// `threads` std::threads (threads a multiple of 32).
template <typename Kernel>
void EmulatedLaunch(unsigned grid, unsigned threads, Kernel kernel) {
  gridDim.x = grid;
  blockDim.x = threads;
  for (unsigned b = 0; b < grid; ++b) {
    EmulatedBlock block;
    block.block = std::make_unique<std::barrier<>>(threads);
    for (unsigned w = 0; w < threads / 32; ++w) {
      block.warps.push_back(std::make_unique<std::barrier<>>(32));
    }
    emulated_block = &block;
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t) {
      pool.emplace_back([=] {
        threadIdx.x = t;
        blockIdx.x = b;
        kernel();
      });
    }
    for (std::thread& thread : pool) thread.join();
  }
}

#endif  // POLYOPS_TESTS_CUDA_EMULATION_CUDA_RUNTIME_H_
