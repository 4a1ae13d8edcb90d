// What every CUDA slot shares: the call's stream, CUDA error reporting, the
// 16-bit float types behind polyops::Half / BFloat16, warp and block
// reductions in float32, and scratch memory on the call's stream.
#ifndef POLYOPS_CUDA_RUNTIME_COMMON_CUH_
#define POLYOPS_CUDA_RUNTIME_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/data_type.h"
#include "core/error.h"
#include "core/handle.h"

namespace polyops::cuda {

// polyops' storage structs have the same 2-byte layout as CUDA's types.
template <typename T>
struct Native {
  using type = T;
};
template <>
struct Native<Half> {
  using type = __half;
};
template <>
struct Native<BFloat16> {
  using type = __nv_bfloat16;
};
template <typename T>
using NativeT = typename Native<T>::type;

__device__ __forceinline__ float ToFloat(float value) { return value; }
__device__ __forceinline__ float ToFloat(__half value) {
  return __half2float(value);
}
__device__ __forceinline__ float ToFloat(__nv_bfloat16 value) {
  return __bfloat162float(value);
}

// Round to nearest even, as torch and the CPU slots do.
template <typename T>
__device__ __forceinline__ T FromFloat(float value);
template <>
__device__ __forceinline__ float FromFloat<float>(float value) {
  return value;
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float value) {
  return __float2half_rn(value);
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float value) {
  return __float2bfloat16_rn(value);
}

// Null is the legacy default stream, a valid launch target.
inline cudaStream_t StreamOf(const Handle& handle) {
  return static_cast<cudaStream_t>(handle.stream);
}

// A failed CUDA runtime call: BackendError (RuntimeError in Python) naming
// the op, what was attempted and CUDA's own message.
void ThrowCudaError(cudaError_t status, const char* op, const char* what);

inline void Check(cudaError_t status, const char* op, const char* what) {
  if (status != cudaSuccess) ThrowCudaError(status, op, what);
}

// After a launch: a bad configuration or a GPU the fatbinary has no code
// for fails here, at the call, not at the next synchronization.
inline void CheckLaunch(const char* op) {
  Check(cudaGetLastError(), op, "kernel launch");
}

__device__ __forceinline__ float WarpSum(float value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  return value;
}

__device__ __forceinline__ float WarpMax(float value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  }
  return value;
}

// Block-wide sum / max for blockDim.x a multiple of 32 (<= 1024); every
// thread gets the result. `shared` holds 32 floats. The fixed order of the
// tree makes the result the same on every run.
__device__ __forceinline__ float BlockSum(float value, float* shared) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  value = WarpSum(value);
  __syncthreads();  // `shared` may still be read by a previous reduction
  if (lane == 0) shared[warp] = value;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  value = lane < warps ? shared[lane] : 0.0f;
  return WarpSum(value);
}

__device__ __forceinline__ float BlockMax(float value, float* shared) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  value = WarpMax(value);
  __syncthreads();
  if (lane == 0) shared[warp] = value;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  value = lane < warps ? shared[lane] : -INFINITY;
  return WarpMax(value);
}

// Scratch device memory for one call, from torch's CUDA caching allocator
// (installed by the Python extension, src/cuda/runtime/workspace.cu): no
// cudaMalloc on a cache hit, and the memory is reused only by work queued after
// this call on the same stream. Freed (returned to the allocator) at scope
// exit; kernels queued on the call's stream before that still own it.
class Workspace {
 public:
  Workspace(const Handle& handle, size_t bytes, const char* op);
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
  void* context_ = nullptr;  // the allocator's handle to free
  void (*release_)(void*) = nullptr;
};

}  // namespace polyops::cuda

#endif  // POLYOPS_CUDA_RUNTIME_COMMON_CUH_
