// Runtime enums -> compile-time tags.
#ifndef POLYOPS_CORE_DISPATCH_H_
#define POLYOPS_CORE_DISPATCH_H_

#include <cstdint>
#include <type_traits>

#include "core/data_type.h"
#include "core/error.h"

namespace polyops {

template <typename T>
struct TypeTag {
  using type = T;
};

template <typename T>
struct DataTypeOf;
#define POLYOPS_DATA_TYPE_OF(cpp_type, enum_value)           \
  template <>                                                \
  struct DataTypeOf<cpp_type> {                              \
    static constexpr DataType kValue = DataType::enum_value; \
  };
POLYOPS_DATA_TYPE_OF(bool, kBool)
POLYOPS_DATA_TYPE_OF(int8_t, kInt8)
POLYOPS_DATA_TYPE_OF(int16_t, kInt16)
POLYOPS_DATA_TYPE_OF(int32_t, kInt32)
POLYOPS_DATA_TYPE_OF(int64_t, kInt64)
POLYOPS_DATA_TYPE_OF(uint8_t, kUInt8)
POLYOPS_DATA_TYPE_OF(Half, kFloat16)
POLYOPS_DATA_TYPE_OF(BFloat16, kBFloat16)
POLYOPS_DATA_TYPE_OF(float, kFloat32)
POLYOPS_DATA_TYPE_OF(double, kFloat64)
#undef POLYOPS_DATA_TYPE_OF

// Calls fn(TypeTag<T>{}) for the C++ type T of `dtype`, which must be one of
// `Ts`; any other dtype is a NotImplemented naming `what` (e.g. "polyops.add").
template <typename... Ts, typename Fn>
void DispatchDataType(DataType dtype, const char* what, Fn&& fn) {
  bool matched = false;
  ((!matched && dtype == DataTypeOf<Ts>::kValue
        ? (fn(TypeTag<Ts>{}), matched = true)
        : false),
   ...);
  POLYOPS_CHECK_T(matched, NotImplemented, what, " does not support dtype ",
                  DataTypeName(dtype));
}

// The dtype lists used across ops.
#define POLYOPS_FLOAT_TYPES ::polyops::Half, ::polyops::BFloat16, float
#define POLYOPS_ALL_FLOAT_TYPES POLYOPS_FLOAT_TYPES, double
#define POLYOPS_INTEGER_TYPES int8_t, int16_t, int32_t, int64_t, uint8_t
#define POLYOPS_ALL_TYPES bool, POLYOPS_INTEGER_TYPES, POLYOPS_ALL_FLOAT_TYPES

}  // namespace polyops

#endif  // POLYOPS_CORE_DISPATCH_H_
