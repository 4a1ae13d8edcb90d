// Element conversions of the CANN test double: float16 / bfloat16 <-> float,
// and loads/stores of any stored dtype as double or int64.
#ifndef POLYOPS_CANN_DOUBLE_NUMERIC_H_
#define POLYOPS_CANN_DOUBLE_NUMERIC_H_

#include <cmath>
#include <cstdint>
#include <cstring>

#include "nnopbase.h"

namespace cann_double {

inline uint32_t FloatBits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
inline float BitsFloat(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t man = h & 0x3ff;
  if (exp == 0x1f) return BitsFloat(sign | 0x7f800000 | (man << 13));
  if (exp == 0) {  // zero or subnormal: man * 2^-24
    const float v = static_cast<float>(man) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return BitsFloat(sign | ((exp + 112) << 23) | (man << 13));
}

// Round to nearest even, overflow to infinity.
inline uint16_t FloatToHalf(float f) {
  const uint32_t b = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((b >> 16) & 0x8000);
  const float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7e00;
  if (a >= 65520.0f) return sign | 0x7c00;  // rounds to infinity
  if (a < 6.103515625e-05f) {               // subnormal half: units of 2^-24
    // nearbyint rounds half to even in the default rounding mode.
    const float units = std::nearbyint(a * 16777216.0f);
    return sign | static_cast<uint16_t>(units);
  }
  const uint32_t ab = FloatBits(a);
  uint32_t rounded = ab + 0xfff + ((ab >> 13) & 1);
  rounded &= ~0x1fffu;
  return sign | static_cast<uint16_t>(((rounded >> 23) - 112) << 10 |
                                      ((rounded >> 13) & 0x3ff));
}

inline float Bf16ToFloat(uint16_t h) {
  return BitsFloat(static_cast<uint32_t>(h) << 16);
}

inline uint16_t FloatToBf16(float f) {
  const uint32_t b = FloatBits(f);
  if (std::isnan(f)) return static_cast<uint16_t>((b >> 16) | 0x40);
  return static_cast<uint16_t>((b + 0x7fff + ((b >> 16) & 1)) >> 16);
}

// double -> float rounded to odd, so that a second rounding to a narrower
// format (half, bf16) equals one direct rounding of the double.
inline float RoundToOddFloat(double d) {
  float f = static_cast<float>(d);
  if (std::isfinite(f) && static_cast<double>(f) != d &&
      (FloatBits(f) & 1) == 0) {
    f = std::nextafter(f, static_cast<double>(f) > d ? -INFINITY : INFINITY);
  }
  return f;
}

inline void* ElementPtr(const TensorView& t, int64_t element) {
  return static_cast<char*>(t.data) + element * ItemSize(t.dtype);
}

// Reads element `element` (elements from t.data, offset included).
inline double LoadDouble(const TensorView& t, int64_t element) {
  const void* p = ElementPtr(t, element);
  switch (t.dtype) {
    case kFloat:
      return *static_cast<const float*>(p);
    case kFloat16:
      return HalfToFloat(*static_cast<const uint16_t*>(p));
    case kBf16:
      return Bf16ToFloat(*static_cast<const uint16_t*>(p));
    case kDouble:
      return *static_cast<const double*>(p);
    case kInt8:
      return *static_cast<const int8_t*>(p);
    case kUint8:
      return *static_cast<const uint8_t*>(p);
    case kInt16:
      return *static_cast<const int16_t*>(p);
    case kUint16:
      return *static_cast<const uint16_t*>(p);
    case kInt32:
      return *static_cast<const int32_t*>(p);
    case kUint32:
      return *static_cast<const uint32_t*>(p);
    case kInt64:
      return static_cast<double>(*static_cast<const int64_t*>(p));
    case kUint64:
      return static_cast<double>(*static_cast<const uint64_t*>(p));
    case kBool:
      return *static_cast<const uint8_t*>(p) != 0 ? 1.0 : 0.0;
    default:
      return 0;
  }
}

inline int64_t LoadInt(const TensorView& t, int64_t element) {
  const void* p = ElementPtr(t, element);
  switch (t.dtype) {
    case kInt64:
      return *static_cast<const int64_t*>(p);
    case kUint64:
      return static_cast<int64_t>(*static_cast<const uint64_t*>(p));
    case kInt32:
      return *static_cast<const int32_t*>(p);
    case kUint32:
      return *static_cast<const uint32_t*>(p);
    default:
      if (IsFloating(t.dtype)) {
        const double v = LoadDouble(t, element);
        return std::isfinite(v) ? static_cast<int64_t>(v) : 0;
      }
      return static_cast<int64_t>(LoadDouble(t, element));
  }
}

// Writes v rounded once (to nearest even) to t's dtype; integers truncate
// toward zero like torch casts, bool is v != 0.
inline void StoreDouble(const TensorView& t, int64_t element, double v) {
  void* p = ElementPtr(t, element);
  switch (t.dtype) {
    case kFloat:
      *static_cast<float*>(p) = static_cast<float>(v);
      return;
    case kFloat16:
      *static_cast<uint16_t*>(p) = FloatToHalf(RoundToOddFloat(v));
      return;
    case kBf16:
      *static_cast<uint16_t*>(p) = FloatToBf16(RoundToOddFloat(v));
      return;
    case kDouble:
      *static_cast<double*>(p) = v;
      return;
    case kBool:
      *static_cast<uint8_t*>(p) = v != 0 ? 1 : 0;
      return;
    default:
      break;
  }
  const int64_t i = std::isfinite(v) ? static_cast<int64_t>(v) : 0;
  switch (t.dtype) {
    case kInt8:
      *static_cast<int8_t*>(p) = static_cast<int8_t>(i);
      return;
    case kUint8:
      *static_cast<uint8_t*>(p) = static_cast<uint8_t>(i);
      return;
    case kInt16:
      *static_cast<int16_t*>(p) = static_cast<int16_t>(i);
      return;
    case kUint16:
      *static_cast<uint16_t*>(p) = static_cast<uint16_t>(i);
      return;
    case kInt32:
      *static_cast<int32_t*>(p) = static_cast<int32_t>(i);
      return;
    case kUint32:
      *static_cast<uint32_t*>(p) = static_cast<uint32_t>(i);
      return;
    case kInt64:
      *static_cast<int64_t*>(p) = i;
      return;
    case kUint64:
      *static_cast<uint64_t*>(p) = static_cast<uint64_t>(i);
      return;
    default:
      return;
  }
}

// Exact integer store (no detour through double): a value outside the
// dtype's range keeps its low bits (two's complement wrap, as torch and
// polyops define integer overflow; the chip's own behaviour is unverified).
inline void StoreInt(const TensorView& t, int64_t element, int64_t v) {
  if (IsFloating(t.dtype) || t.dtype == kBool) {
    StoreDouble(t, element, static_cast<double>(v));
    return;
  }
  void* p = ElementPtr(t, element);
  const auto bits = static_cast<uint64_t>(v);
  switch (t.dtype) {
    case kInt8:
    case kUint8: {
      const auto narrow = static_cast<uint8_t>(bits);
      std::memcpy(p, &narrow, 1);
      return;
    }
    case kInt16:
    case kUint16: {
      const auto narrow = static_cast<uint16_t>(bits);
      std::memcpy(p, &narrow, 2);
      return;
    }
    case kInt32:
    case kUint32: {
      const auto narrow = static_cast<uint32_t>(bits);
      std::memcpy(p, &narrow, 4);
      return;
    }
    default:
      std::memcpy(p, &bits, 8);
  }
}

}  // namespace cann_double

#endif  // POLYOPS_CANN_DOUBLE_NUMERIC_H_
