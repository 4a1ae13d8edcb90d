// Block conversions between storage types and the compute type (float for
// the 16-bit floats). Kernels stage data through small float buffers with
// these, so their arithmetic loops are plain float loops the compiler
// vectorizes, and float16 conversion uses F16C where the CPU has it.
#ifndef POLYOPS_CPU_RUNTIME_CONVERT_H_
#define POLYOPS_CPU_RUNTIME_CONVERT_H_

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/data_type.h"
#include "cpu/runtime/isa.h"

// Forces inlining, so helpers take the ISA of the kernel that calls them.
#define POLYOPS_INLINE inline __attribute__((always_inline))

namespace polyops::cpu {

template <typename T>
struct ComputeTypeOf {
  using type = T;
};
template <>
struct ComputeTypeOf<Half> {
  using type = float;
};
template <>
struct ComputeTypeOf<BFloat16> {
  using type = float;
};
template <typename T>
using ComputeType = typename ComputeTypeOf<T>::type;

// Scalar loads and stores through the compute type.
template <typename T>
POLYOPS_INLINE ComputeType<T> Load(const T* ptr) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return ToFloat(*ptr);
  } else {
    return *ptr;
  }
}

template <typename T>
POLYOPS_INLINE void Store(T* ptr, ComputeType<T> value) {
  if constexpr (std::is_same_v<T, Half>) {
    *ptr = ToHalf(value);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    *ptr = ToBFloat16(value);
  } else {
    *ptr = value;
  }
}

// Contiguous float16 <-> float32; dispatches to F16C at run time.
void HalfToFloat(const Half* src, float* dst, int64_t n);
void FloatToHalf(const float* src, Half* dst, int64_t n);

// n elements from src (element stride `stride`) into dst, converted.
template <typename T>
POLYOPS_INLINE void LoadBlock(const T* src, int64_t stride, ComputeType<T>* dst,
                              int64_t n) {
  if (stride == 1) {
    if constexpr (std::is_same_v<T, Half>) {
      HalfToFloat(src, dst, n);
      return;
    } else if constexpr (std::is_same_v<T, BFloat16>) {
      // Floats written through a uint32_t pointer may be read back stale by
      // the caller's float loads (strict aliasing: GCC hoisted a row max's
      // first load above these stores); BitsToFloat's memcpy is a real float
      // store and vectorizes the same.
      const uint16_t* bits = reinterpret_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i)
        dst[i] = BitsToFloat(static_cast<uint32_t>(bits[i]) << 16);
      return;
    } else {
      std::memcpy(dst, src, sizeof(T) * n);
      return;
    }
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = Load(src + i * stride);
}

template <typename T>
POLYOPS_INLINE void StoreBlock(const ComputeType<T>* src, T* dst,
                               int64_t stride, int64_t n) {
  if (stride == 1) {
    if constexpr (std::is_same_v<T, Half>) {
      FloatToHalf(src, dst, n);
      return;
    } else if constexpr (std::is_same_v<T, BFloat16>) {
      // Reads the floats as floats, for the reason LoadBlock writes them so.
      uint16_t* bits = reinterpret_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) {
        const uint32_t value = FloatToBits(src[i]);
        const uint32_t rounded = value + 0x7fffu + ((value >> 16) & 1u);
        const bool is_nan = (value & 0x7fffffffu) > 0x7f800000u;
        bits[i] = is_nan ? static_cast<uint16_t>((value >> 16) | 0x40u)
                         : static_cast<uint16_t>(rounded >> 16);
      }
      return;
    } else {
      std::memcpy(dst, src, sizeof(T) * n);
      return;
    }
  }
  for (int64_t i = 0; i < n; ++i) Store(dst + i * stride, src[i]);
}

}  // namespace polyops::cpu

#endif  // POLYOPS_CPU_RUNTIME_CONVERT_H_
