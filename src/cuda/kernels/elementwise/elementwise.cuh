// What the CUDA add, mul, cast and cat slots share: the strided iteration of
// core/elementwise_layout.h on the device, launch geometry and 16-byte
// vectors.
#ifndef POLYOPS_CUDA_KERNELS_ELEMENTWISE_ELEMENTWISE_CUH_
#define POLYOPS_CUDA_KERNELS_ELEMENTWISE_ELEMENTWISE_CUH_

#include <algorithm>
#include <cstdint>

#include "core/elementwise_layout.h"
#include "cuda/runtime/common.cuh"

namespace polyops::cuda {

inline constexpr int kElementwiseThreads = 256;
// Grid-stride loops: more blocks than this add no parallelism on any
// current GPU (132 SMs x 2048 threads / 256 = 1056 resident blocks).
inline constexpr int64_t kMaxElementwiseBlocks = 65536;

inline unsigned ElementwiseBlocks(int64_t work_items) {
  const int64_t blocks =
      (work_items + kElementwiseThreads - 1) / kElementwiseThreads;
  return static_cast<unsigned>(
      std::clamp<int64_t>(blocks, 1, kMaxElementwiseBlocks));
}

__device__ __forceinline__ int64_t GlobalThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ int64_t GridThreads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// ElementwiseLayout<K>'s iteration space, passed by value to a kernel.
template <int K>
struct StridedIndexer {
  int ndim = 1;
  int64_t shape[kMaxDims] = {};
  int64_t strides[K][kMaxDims] = {};

  static StridedIndexer Make(const ElementwiseLayout<K>& layout) {
    StridedIndexer indexer;
    indexer.ndim = layout.ndim;
    for (int d = 0; d < layout.ndim; ++d) {
      indexer.shape[d] = layout.shape[d];
      for (int k = 0; k < K; ++k) indexer.strides[k][d] = layout.strides[k][d];
    }
    return indexer;
  }

  // Element offsets of every operand for row-major position `linear`.
  __device__ __forceinline__ void Offsets(int64_t linear,
                                          int64_t (&offsets)[K]) const {
#pragma unroll
    for (int k = 0; k < K; ++k) offsets[k] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t index = linear % shape[d];
      linear /= shape[d];
#pragma unroll
      for (int k = 0; k < K; ++k) offsets[k] += index * strides[k][d];
    }
  }
};

// `fn(offsets)` for every element of the layout's iteration space.
template <int K, typename Fn>
__global__ void ForEachStridedKernel(StridedIndexer<K> indexer, int64_t numel,
                                     Fn fn) {
  for (int64_t i = GlobalThread(); i < numel; i += GridThreads()) {
    int64_t offsets[K];
    indexer.Offsets(i, offsets);
    fn(offsets);
  }
}

template <int K, typename Fn>
void LaunchStrided(const ElementwiseLayout<K>& layout, cudaStream_t stream,
                   const char* op, const Fn& fn) {
  if (layout.numel == 0) return;
  ForEachStridedKernel<K>
      <<<ElementwiseBlocks(layout.numel), kElementwiseThreads, 0, stream>>>(
          StridedIndexer<K>::Make(layout), layout.numel, fn);
  CheckLaunch(op);
}

template <typename T, int kCount>
struct alignas(sizeof(T) * kCount) Vector {
  T values[kCount];
};

// Elements per 16-byte vector.
template <typename T>
inline constexpr int kVector16 = 16 / static_cast<int>(sizeof(T));

inline bool Aligned16(const void* pointer) {
  return reinterpret_cast<uintptr_t>(pointer) % 16 == 0;
}

}  // namespace polyops::cuda

#endif  // POLYOPS_CUDA_KERNELS_ELEMENTWISE_ELEMENTWISE_CUH_
