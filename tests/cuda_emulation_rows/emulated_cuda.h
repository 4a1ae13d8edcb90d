// A host stand-in for cuda/common.cuh and the CUDA runtime, enough to run
// the row-wise CUDA slots (src/cuda/{rms_norm,...}/, cuda/rows.cuh,
// cuda/rotary.cuh) on a CPU: tests/test_cuda_rows_emulated.py rewrites each
// `kernel<<<grid, block, shared, stream>>>(args)` of those headers into
// `EmulatedLaunch(grid, block, shared, stream, [&] { kernel(args); })`.
// A launch runs blockDim.x std::threads that walk the grid's blocks in
// order, with a std::barrier for __syncthreads and between blocks (so
// `__shared__` = `static` is one block's memory at a time). BlockSum and
// BlockMax reduce through that barrier instead of warp shuffles. The 16-bit
// types are polyops::Half / BFloat16 with polyops' own conversions (round to
// nearest even). It checks the slots' logic -- row offsets, packs and their
// fallbacks, masks, index checks, barriers, in-place safety -- not nvcc, a
// GPU or CUDA's float intrinsics.
#ifndef POLYOPS_TESTS_CUDA_EMULATION_ROWS_EMULATED_CUDA_H_
#define POLYOPS_TESTS_CUDA_EMULATION_ROWS_EMULATED_CUDA_H_

#include <math.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "core/data_type.h"
#include "core/error.h"
#include "core/handle.h"

// The slot headers include cuda/common.cuh: this file replaces it.
#define POLYOPS_CUDA_COMMON_CUH_

#define __device__
#define __global__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(threads)

using cudaStream_t = void*;
using cudaError_t = int;
inline constexpr cudaError_t cudaSuccess = 0;

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1)
      : x(x_), y(y_), z(z_) {}
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};

inline thread_local dim3 threadIdx;
inline thread_local dim3 blockIdx;
inline dim3 blockDim;
inline dim3 gridDim;

namespace emulation {
inline std::barrier<>* block_barrier = nullptr;
inline float slots[1024];  // one value per thread for the block reductions
}  // namespace emulation

inline void __syncthreads() { emulation::block_barrier->arrive_and_wait(); }

inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }

// kernel<<<grid, block>>>: blockDim.x threads, each walking every block of
// the grid (x fastest) with a barrier between blocks.
template <typename Kernel>
void EmulatedLaunch(dim3 grid, dim3 block, size_t, cudaStream_t,
                    Kernel kernel) {
  gridDim = grid;
  blockDim = block;
  std::barrier<> barrier(block.x);
  emulation::block_barrier = &barrier;
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < block.x; ++t) {
    pool.emplace_back([&, t] {
      threadIdx = dim3(t);
      for (unsigned y = 0; y < grid.y; ++y) {
        for (unsigned x = 0; x < grid.x; ++x) {
          blockIdx = dim3(x, y);
          kernel();
          barrier.arrive_and_wait();
        }
      }
    });
  }
  for (std::thread& thread : pool) thread.join();
  emulation::block_barrier = nullptr;
}

namespace polyops::cuda {

template <typename T>
using NativeT = T;

inline float ToFloat(float value) { return value; }
using polyops::ToFloat;

template <typename T>
T FromFloat(float value);
template <>
inline float FromFloat<float>(float value) {
  return value;
}
template <>
inline Half FromFloat<Half>(float value) {
  return ToHalf(value);
}
template <>
inline BFloat16 FromFloat<BFloat16>(float value) {
  return ToBFloat16(value);
}

inline cudaStream_t StreamOf(const Handle& handle) { return handle.stream; }
inline void CheckLaunch(const char*) {}

// Every thread publishes its value, then each reduces all of them in thread
// order (a different order from the GPU's tree: float32 sums may differ in
// the last bits, within every tolerance).
inline float BlockReduce(float value, bool max) {
  __syncthreads();
  emulation::slots[threadIdx.x] = value;
  __syncthreads();
  float result = max ? -INFINITY : 0.0f;
  for (unsigned t = 0; t < blockDim.x; ++t) {
    result = max ? std::fmax(result, emulation::slots[t])
                 : result + emulation::slots[t];
  }
  return result;
}
inline float BlockSum(float value, float*) { return BlockReduce(value, false); }
inline float BlockMax(float value, float*) { return BlockReduce(value, true); }

}  // namespace polyops::cuda

#endif  // POLYOPS_TESTS_CUDA_EMULATION_ROWS_EMULATED_CUDA_H_
