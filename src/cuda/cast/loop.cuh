#ifndef POLYOPS_CUDA_CAST_LOOP_CUH_
#define POLYOPS_CUDA_CAST_LOOP_CUH_

#include <cstdint>
#include <type_traits>

#include "base/cast.h"
#include "core/dispatch.h"
#include "core/operator.h"
#include "cuda/kernels/elementwise/elementwise.cuh"

namespace polyops {
namespace cuda {

// As cpu::RoundToOddFloat (src/cpu/cast/loop.h): rounding to float with
// round-to-odd first makes the final rounding to float16 / bfloat16 equal one
// direct rounding of the double or integer.
__device__ __forceinline__ float RoundToOddFloat(double value) {
  float rounded = __double2float_rn(value);
  if (isfinite(rounded) && static_cast<double>(rounded) != value) {
    if (fabs(static_cast<double>(rounded)) > fabs(value)) {
      rounded = nextafterf(rounded, 0.0f);
    }
    rounded = __uint_as_float(__float_as_uint(rounded) | 1u);
  }
  return rounded;
}

template <typename I>
__device__ __forceinline__ float RoundToOddFloatFromInteger(I value) {
  bool negative = false;
  if constexpr (std::is_signed_v<I>) negative = value < 0;
  uint64_t magnitude = static_cast<uint64_t>(value);
  if (negative) magnitude = ~magnitude + 1;
  if (magnitude < (uint64_t{1} << 24)) return static_cast<float>(value);
  const int shift = (64 - __clzll(static_cast<long long>(magnitude))) - 24;
  uint64_t kept = magnitude >> shift;
  if (magnitude & ((uint64_t{1} << shift) - 1)) kept |= 1;  // sticky bit
  const float result = ldexpf(static_cast<float>(kept), shift);
  return negative ? -result : result;
}

template <typename T>
inline constexpr bool kIs16BitFloat =
    std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

// torch's .to() semantics, as cpu::ConvertValue.
template <typename To, typename From>
__device__ __forceinline__ To ConvertValue(From value) {
  if constexpr (kIs16BitFloat<From>) {
    return ConvertValue<To>(ToFloat(value));
  } else if constexpr (std::is_same_v<To, bool>) {
    return value != From{0};
  } else if constexpr (kIs16BitFloat<To>) {
    float narrowed;
    if constexpr (std::is_same_v<From, float>) {
      narrowed = value;
    } else if constexpr (std::is_integral_v<From>) {
      narrowed = RoundToOddFloatFromInteger(value);
    } else {
      narrowed = RoundToOddFloat(static_cast<double>(value));
    }
    return FromFloat<To>(narrowed);
  } else {
    return static_cast<To>(value);
  }
}

template <typename To, typename From>
__global__ void CastContiguousKernel(int64_t n, To* out, const From* input) {
  for (int64_t i = GlobalThread(); i < n; i += GridThreads()) {
    out[i] = ConvertValue<To>(input[i]);
  }
}

template <typename To, typename From>
struct CastStridedFn {
  To* out;
  const From* input;
  __device__ __forceinline__ void operator()(const int64_t (&at)[2]) const {
    out[at[0]] = ConvertValue<To>(input[at[1]]);
  }
};

}  // namespace cuda

// Slot 0: one element per thread between any two of the ten dtypes
// (compiled, never executed on a GPU yet). Not vectorized: 100 dtype pairs
// x 16-byte variants would multiply compile time for a rarely hot op.
template <>
class Operator<Cast, Device::Type::kCuda, 0> : public Cast {
 public:
  static constexpr const char* kImplementationName = "loop";
  using Cast::Cast;

  void operator()(const Handle& handle, const Args& args) const override {
    if (layout_.numel == 0) return;
    const cudaStream_t stream = cuda::StreamOf(handle);
    DispatchDataType<POLYOPS_ALL_TYPES>(from_, "polyops.cast", [&](auto from) {
      using From = cuda::NativeT<typename decltype(from)::type>;
      DispatchDataType<POLYOPS_ALL_TYPES>(to_, "polyops.cast", [&](auto to) {
        using To = cuda::NativeT<typename decltype(to)::type>;
        To* y = reinterpret_cast<To*>(args.out->data());
        const From* x = reinterpret_cast<const From*>(args.input.data());
        if (layout_.IsContiguous1D()) {
          cuda::CastContiguousKernel<To, From>
              <<<cuda::ElementwiseBlocks(layout_.numel),
                 cuda::kElementwiseThreads, 0, stream>>>(layout_.numel, y, x);
          cuda::CheckLaunch(kName);
        } else {
          cuda::LaunchStrided(layout_, stream, kName,
                              cuda::CastStridedFn<To, From>{y, x});
        }
      });
    });
  }
};

}  // namespace polyops

#endif  // POLYOPS_CUDA_CAST_LOOP_CUH_
