// The kernels of the CUDA add and mul slots: out = input (op) other over the
// layout of base/binary_elementwise.h, as the CPU slots compute it: 16-bit
// floats in float32 with one rounding to nearest even, float32 and float64 in
// their own precision, integers wrapping.
#ifndef POLYOPS_CUDA_BINARY_ELEMENTWISE_CUH_
#define POLYOPS_CUDA_BINARY_ELEMENTWISE_CUH_

#include <cstdint>
#include <type_traits>

#include "core/dispatch.h"
#include "core/tensor.h"
#include "cuda/elementwise.cuh"

namespace polyops::cuda {

struct AddFn {
  template <typename C>
  __device__ __forceinline__ static C Apply(C a, C b) {
    return a + b;
  }
};

struct MulFn {
  template <typename C>
  __device__ __forceinline__ static C Apply(C a, C b) {
    return a * b;
  }
};

template <typename Op, typename T>
__device__ __forceinline__ T ApplyBinary(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    // Modulo 2^64 then truncated: two's complement wraparound, no signed
    // overflow (and no int promotion overflow for 16-bit operands).
    return static_cast<T>(
        Op::Apply(static_cast<uint64_t>(a), static_cast<uint64_t>(b)));
  } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    return Op::Apply(a, b);
  } else {
    return FromFloat<T>(Op::Apply(ToFloat(a), ToFloat(b)));
  }
}

// Contiguous operands, kCount elements per access (kCount = 16 bytes when
// every pointer is 16-byte aligned, else 1); the grid then finishes the tail.
template <typename Op, typename T, int kCount>
__global__ void BinaryContiguousKernel(int64_t n, T* out, const T* input,
                                       const T* other) {
  using V = Vector<T, kCount>;
  const int64_t vectors = n / kCount;
  for (int64_t i = GlobalThread(); i < vectors; i += GridThreads()) {
    const V a = reinterpret_cast<const V*>(input)[i];
    const V b = reinterpret_cast<const V*>(other)[i];
    V result;
#pragma unroll
    for (int j = 0; j < kCount; ++j) {
      result.values[j] = ApplyBinary<Op>(a.values[j], b.values[j]);
    }
    reinterpret_cast<V*>(out)[i] = result;
  }
  for (int64_t i = vectors * kCount + GlobalThread(); i < n;
       i += GridThreads()) {
    out[i] = ApplyBinary<Op>(input[i], other[i]);
  }
}

template <typename Op, typename T>
struct BinaryStridedFn {
  T* out;
  const T* input;
  const T* other;
  __device__ __forceinline__ void operator()(const int64_t (&at)[3]) const {
    out[at[0]] = ApplyBinary<Op>(input[at[1]], other[at[2]]);
  }
};

template <typename Op>
void RunBinary(const ElementwiseLayout<3>& layout, DataType dtype,
               const Tensor& out, const Tensor& input, const Tensor& other,
               cudaStream_t stream, const char* op) {
  if (layout.numel == 0) return;
  DispatchDataType<POLYOPS_INTEGER_TYPES, POLYOPS_ALL_FLOAT_TYPES>(
      dtype, op, [&](auto tag) {
        using T = NativeT<typename decltype(tag)::type>;
        T* y = reinterpret_cast<T*>(out.data());
        const T* a = reinterpret_cast<const T*>(input.data());
        const T* b = reinterpret_cast<const T*>(other.data());
        if (!layout.IsContiguous1D()) {
          LaunchStrided(layout, stream, op, BinaryStridedFn<Op, T>{y, a, b});
          return;
        }
        const int64_t n = layout.numel;
        if (Aligned16(y) && Aligned16(a) && Aligned16(b)) {
          constexpr int kCount = kVector16<T>;
          BinaryContiguousKernel<Op, T, kCount>
              <<<ElementwiseBlocks(n / kCount + 1), kElementwiseThreads, 0,
                 stream>>>(n, y, a, b);
        } else {
          BinaryContiguousKernel<Op, T, 1>
              <<<ElementwiseBlocks(n), kElementwiseThreads, 0, stream>>>(n, y,
                                                                         a, b);
        }
        CheckLaunch(op);
      });
}

}  // namespace polyops::cuda

#endif  // POLYOPS_CUDA_BINARY_ELEMENTWISE_CUH_
