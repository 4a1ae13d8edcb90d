#ifndef POLYOPS_CPU_CAST_LOOP_H_
#define POLYOPS_CPU_CAST_LOOP_H_

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "base/cast.h"
#include "core/dispatch.h"
#include "core/operator.h"
#include "cpu/kernels/elementwise/elementwise.h"

namespace polyops {
namespace cpu {

// Rounds to float with round-to-odd. A later round to nearest even into a
// type of at most 22 mantissa bits (float16, bfloat16) then gives the same
// result as one direct rounding, which a plain double -> float -> half
// chain does not.
inline float RoundToOddFloat(double value) {
  float rounded = static_cast<float>(value);
  if (std::isfinite(rounded) && static_cast<double>(rounded) != value) {
    if (std::fabs(static_cast<double>(rounded)) > std::fabs(value)) {
      rounded = std::nextafter(rounded, 0.0f);
    }
    rounded = BitsToFloat(FloatToBits(rounded) | 1u);
  }
  return rounded;
}

// The same for integers, straight from the integer: going through double
// would round once already above 2^53.
template <typename I>
inline float RoundToOddFloat(I value, std::true_type /*integral*/) {
  bool negative = false;
  if constexpr (std::is_signed_v<I>) negative = value < 0;
  uint64_t magnitude = static_cast<uint64_t>(value);
  if (negative) magnitude = ~magnitude + 1;
  if (magnitude < (uint64_t{1} << 24)) return static_cast<float>(value);
  const int shift = (64 - __builtin_clzll(magnitude)) - 24;
  uint64_t kept = magnitude >> shift;
  if (magnitude & ((uint64_t{1} << shift) - 1)) kept |= 1;  // sticky bit
  const float result = std::ldexp(static_cast<float>(kept), shift);
  return negative ? -result : result;
}

template <typename To, typename From>
inline To ConvertValue(From value) {
  if constexpr (std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>) {
    return ConvertValue<To>(ToFloat(value));
  } else if constexpr (std::is_same_v<To, bool>) {
    return value != From{0};
  } else if constexpr (std::is_same_v<To, Half> ||
                       std::is_same_v<To, BFloat16>) {
    float narrowed;
    if constexpr (std::is_same_v<From, float>) {
      narrowed = value;
    } else if constexpr (std::is_integral_v<From>) {
      narrowed = RoundToOddFloat(value, std::true_type{});
    } else {
      narrowed = RoundToOddFloat(static_cast<double>(value));
    }
    if constexpr (std::is_same_v<To, Half>) {
      return ToHalf(narrowed);
    } else {
      return ToBFloat16(narrowed);
    }
  } else {
    return static_cast<To>(value);
  }
}

}  // namespace cpu

// Slot 0: element by element between any two of the ten dtypes.
template <>
class Operator<Cast, Device::Type::kCpu, 0> : public Cast {
 public:
  static constexpr const char* kImplementationName = "loop";
  using Cast::Cast;

  void operator()(const Handle&, const Args& args) const override {
    DispatchDataType<POLYOPS_ALL_TYPES>(from_, "polyops.cast", [&](auto from) {
      using From = typename decltype(from)::type;
      DispatchDataType<POLYOPS_ALL_TYPES>(to_, "polyops.cast", [&](auto to) {
        using To = typename decltype(to)::type;
        To* y = args.out->data_as<To>();
        const From* x = args.input.data_as<From>();
        cpu::ForEachElement(layout_, [&](const int64_t (&at)[2]) {
          y[at[0]] = cpu::ConvertValue<To>(x[at[1]]);
        });
      });
    });
  }
};

}  // namespace polyops

#endif  // POLYOPS_CPU_CAST_LOOP_H_
