// The kernels of the CUDA add and mul slots: out = input (op) other over the
// layout of base/binary_elementwise.h, as the CPU slots compute it: 16-bit
// floats in float32 with one rounding to nearest even, float32 and float64 in
// their own precision, integers wrapping; add's alpha != 1 as a fused
// multiply-add (base/add.h).
#ifndef POLYOPS_CUDA_KERNELS_ELEMENTWISE_BINARY_ELEMENTWISE_CUH_
#define POLYOPS_CUDA_KERNELS_ELEMENTWISE_BINARY_ELEMENTWISE_CUH_

#include <math.h>

#include <cstdint>
#include <type_traits>

#include "core/dispatch.h"
#include "core/tensor.h"
#include "cuda/kernels/elementwise/elementwise.cuh"

namespace polyops::cuda {

struct AddFn {
  template <typename C>
  __device__ __forceinline__ C operator()(C a, C b) const {
    return a + b;
  }
};

struct MulFn {
  template <typename C>
  __device__ __forceinline__ C operator()(C a, C b) const {
    return a * b;
  }
};

// a + alpha * b in compute type C: float and double fused (one rounding,
// as the CPU slots); float16/bfloat16 also compute in float, where
// alpha * b (two 16-bit values) is exact; integers modulo 2^64.
template <typename C>
struct ScaledAddFn {
  C alpha;
  __device__ __forceinline__ C operator()(C a, C b) const {
    if constexpr (std::is_same_v<C, float>) {
      return fmaf(alpha, b, a);
    } else if constexpr (std::is_same_v<C, double>) {
      return fma(alpha, b, a);
    } else {
      return a + alpha * b;
    }
  }
};

// The type T computes in: float for the 16-bit floats, uint64_t for
// integers (two's complement wraparound without signed overflow, and no
// int promotion overflow for 16-bit operands; truncated afterwards).
template <typename T>
using BinaryComputeT = std::conditional_t<
    std::is_integral_v<T>, uint64_t,
    std::conditional_t<std::is_same_v<T, double>, double, float>>;

template <typename T, typename Op>
__device__ __forceinline__ T ApplyBinary(const Op& op, T a, T b) {
  using C = BinaryComputeT<T>;
  if constexpr (std::is_integral_v<T> || std::is_same_v<T, float> ||
                std::is_same_v<T, double>) {
    return static_cast<T>(op(static_cast<C>(a), static_cast<C>(b)));
  } else {
    return FromFloat<T>(op(ToFloat(a), ToFloat(b)));
  }
}

// Contiguous operands, kCount elements per access (kCount = 16 bytes when
// every pointer is 16-byte aligned, else 1); the grid then finishes the tail.
template <typename Op, typename T, int kCount>
__global__ void BinaryContiguousKernel(Op op, int64_t n, T* out, const T* input,
                                       const T* other) {
  using V = Vector<T, kCount>;
  const int64_t vectors = n / kCount;
  for (int64_t i = GlobalThread(); i < vectors; i += GridThreads()) {
    const V a = reinterpret_cast<const V*>(input)[i];
    const V b = reinterpret_cast<const V*>(other)[i];
    V result;
#pragma unroll
    for (int j = 0; j < kCount; ++j) {
      result.values[j] = ApplyBinary(op, a.values[j], b.values[j]);
    }
    reinterpret_cast<V*>(out)[i] = result;
  }
  for (int64_t i = vectors * kCount + GlobalThread(); i < n;
       i += GridThreads()) {
    out[i] = ApplyBinary(op, input[i], other[i]);
  }
}

template <typename Op, typename T>
struct BinaryStridedFn {
  Op op;
  T* out;
  const T* input;
  const T* other;
  __device__ __forceinline__ void operator()(const int64_t (&at)[3]) const {
    out[at[0]] = ApplyBinary(op, input[at[1]], other[at[2]]);
  }
};

template <typename Op, typename T>
void LaunchBinary(const Op& op, const ElementwiseLayout<3>& layout, T* y,
                  const T* a, const T* b, cudaStream_t stream,
                  const char* name) {
  if (!layout.IsContiguous1D()) {
    LaunchStrided(layout, stream, name, BinaryStridedFn<Op, T>{op, y, a, b});
    return;
  }
  const int64_t n = layout.numel;
  if (Aligned16(y) && Aligned16(a) && Aligned16(b)) {
    constexpr int kCount = kVector16<T>;
    BinaryContiguousKernel<Op, T, kCount>
        <<<ElementwiseBlocks(n / kCount + 1), kElementwiseThreads, 0, stream>>>(
            op, n, y, a, b);
  } else {
    BinaryContiguousKernel<Op, T, 1>
        <<<ElementwiseBlocks(n), kElementwiseThreads, 0, stream>>>(op, n, y, a,
                                                                   b);
  }
  CheckLaunch(name);
}

// Dispatches dtype and launches the functor make_op(TypeTag<T>{}) returns.
template <typename MakeOp>
void RunBinaryWith(const ElementwiseLayout<3>& layout, DataType dtype,
                   const Tensor& out, const Tensor& input, const Tensor& other,
                   cudaStream_t stream, const char* name, MakeOp make_op) {
  if (layout.numel == 0) return;
  DispatchDataType<POLYOPS_INTEGER_TYPES, POLYOPS_ALL_FLOAT_TYPES>(
      dtype, name, [&](auto tag) {
        using T = NativeT<typename decltype(tag)::type>;
        LaunchBinary(make_op(TypeTag<T>{}), layout,
                     reinterpret_cast<T*>(out.data()),
                     reinterpret_cast<const T*>(input.data()),
                     reinterpret_cast<const T*>(other.data()), stream, name);
      });
}

// out = input (Op) other.
template <typename Op>
void RunBinary(const ElementwiseLayout<3>& layout, DataType dtype,
               const Tensor& out, const Tensor& input, const Tensor& other,
               cudaStream_t stream, const char* name) {
  RunBinaryWith(layout, dtype, out, input, other, stream, name,
                [](auto) { return Op{}; });
}

// out = input + alpha * other, alpha as base/add.h validated and rounded it.
inline void RunScaledAdd(const ElementwiseLayout<3>& layout, DataType dtype,
                         const Tensor& out, const Tensor& input,
                         const Tensor& other, double alpha, cudaStream_t stream,
                         const char* name) {
  RunBinaryWith(
      layout, dtype, out, input, other, stream, name, [alpha](auto tag) {
        using T = typename decltype(tag)::type;
        using C = BinaryComputeT<T>;
        // A negative integer alpha wraps modulo 2^64, as torch's
        // conversion wraps it into an unsigned dtype.
        if constexpr (std::is_integral_v<T>) {
          return ScaledAddFn<C>{static_cast<C>(static_cast<int64_t>(alpha))};
        } else {
          return ScaledAddFn<C>{static_cast<C>(alpha)};
        }
      });
}

}  // namespace polyops::cuda

#endif  // POLYOPS_CUDA_KERNELS_ELEMENTWISE_BINARY_ELEMENTWISE_CUH_
