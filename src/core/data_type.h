#ifndef POLYOPS_CORE_DATA_TYPE_H_
#define POLYOPS_CORE_DATA_TYPE_H_

#include <cstdint>
#include <cstring>

namespace polyops {

enum class DataType : int8_t {
  kBool,
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kUInt8,
  kFloat16,
  kBFloat16,
  kFloat32,
  kFloat64,
};
inline constexpr int kNumDataTypes = 10;

constexpr int DataTypeSize(DataType dtype) {
  switch (dtype) {
    case DataType::kBool:
    case DataType::kInt8:
    case DataType::kUInt8:
      return 1;
    case DataType::kInt16:
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
    case DataType::kInt32:
    case DataType::kFloat32:
      return 4;
    case DataType::kInt64:
    case DataType::kFloat64:
      return 8;
  }
  return 0;
}

// torch spelling, so messages read like torch's.
constexpr const char* DataTypeName(DataType dtype) {
  switch (dtype) {
    case DataType::kBool:
      return "bool";
    case DataType::kInt8:
      return "int8";
    case DataType::kInt16:
      return "int16";
    case DataType::kInt32:
      return "int32";
    case DataType::kInt64:
      return "int64";
    case DataType::kUInt8:
      return "uint8";
    case DataType::kFloat16:
      return "float16";
    case DataType::kBFloat16:
      return "bfloat16";
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat64:
      return "float64";
  }
  return "unknown";
}

constexpr bool IsFloatingPoint(DataType dtype) {
  return dtype == DataType::kFloat16 || dtype == DataType::kBFloat16 ||
         dtype == DataType::kFloat32 || dtype == DataType::kFloat64;
}

// The three dtypes every op supports.
constexpr bool IsReducedOrSingle(DataType dtype) {
  return dtype == DataType::kFloat16 || dtype == DataType::kBFloat16 ||
         dtype == DataType::kFloat32;
}

// Storage types for the 16-bit floats. Arithmetic always goes through float.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

inline float BitsToFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

inline uint32_t FloatToBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

inline float ToFloat(BFloat16 value) {
  return BitsToFloat(static_cast<uint32_t>(value.bits) << 16);
}

// Round to nearest even; NaN stays a (quiet) NaN with its sign.
inline BFloat16 ToBFloat16(float value) {
  uint32_t bits = FloatToBits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return BFloat16{static_cast<uint16_t>((bits >> 16) | 0x0040u)};
  }
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return BFloat16{static_cast<uint16_t>(bits >> 16)};
}

// IEEE binary16 <-> binary32 in integer arithmetic: exact for every input,
// round to nearest even, no dependence on F16C (vector kernels use their own
// hardware conversions where the ISA has them).
inline float ToFloat(Half value) {
  const uint32_t sign = static_cast<uint32_t>(value.bits & 0x8000u) << 16;
  uint32_t exponent = (value.bits >> 10) & 0x1fu;
  uint32_t mantissa = value.bits & 0x3ffu;
  if (exponent == 0x1fu) {  // inf / nan
    return BitsToFloat(sign | 0x7f800000u | (mantissa << 13));
  }
  if (exponent == 0) {
    if (mantissa == 0) return BitsToFloat(sign);
    // Subnormal: mantissa * 2^-24, exact in float.
    const float magnitude =
        static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
  }
  return BitsToFloat(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

inline Half ToHalf(float value) {
  const uint32_t bits = FloatToBits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) {  // nan: keep it quiet
    return Half{static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu))};
  }
  if (abs >= 0x477ff000u) {  // rounds to >= 65520: overflow to inf
    return Half{static_cast<uint16_t>(sign | 0x7c00u)};
  }
  if (abs < 0x38800000u) {  // below the smallest normal half (2^-14)
    // Scale so the half subnormal unit (2^-24) is 1, then let the float
    // adder round to nearest even.
    const float scaled = BitsToFloat(abs) * 16777216.0f;     // 2^24
    const float rounded = scaled + 8388608.0f - 8388608.0f;  // RNE to integer
    return Half{static_cast<uint16_t>(sign | static_cast<uint16_t>(rounded))};
  }
  uint32_t rebased = abs - (112u << 23);
  rebased += 0x0fffu + ((rebased >> 13) & 1u);
  return Half{static_cast<uint16_t>(sign | (rebased >> 13))};
}

}  // namespace polyops

#endif  // POLYOPS_CORE_DATA_TYPE_H_
