#ifndef POLYOPS_BASE_ADD_H_
#define POLYOPS_BASE_ADD_H_

#include <cmath>
#include <cstdint>
#include <iomanip>
#include <limits>
#include <optional>

#include "base/binary_elementwise.h"
#include "core/handle.h"

namespace polyops {

// add(input, other, *, alpha=1.0, out=None) -> Tensor
//
// out = input + alpha * other, input and other broadcast to one shape
// (torch rules: [3, 1] + [1, 5] -> [3, 5], [5] + [2, 3, 5] -> [2, 3, 5]).
//   input: any shape, any strides; float16, bfloat16, float32, float64,
//          int8/16/32/64 or uint8 (integers wrap on overflow).
//   other: input's dtype, any shape that broadcasts with input's.
//   alpha: float dtypes: first rounded to the dtype (through float32 for
//          float16/bfloat16), as torch's CPU kernel converts it; then
//          float16/bfloat16 compute input + alpha * other in float32 and
//          round to the dtype, float32/float64 as one fused multiply-add
//          (one rounding), the bits of torch's vectorized CPU loop. A
//          finite alpha beyond the dtype's largest value is a ValueError,
//          as in torch; inf and NaN are allowed. Integer dtypes: an integer
//          value in the dtype's range (uint8: [-255, 255], a negative alpha
//          wrapping as in torch; int64: |alpha| < 2**53, since it arrives
//          as a float64, so a larger one may already be rounded), else a
//          ValueError; the product and sum wrap.
//   out:   the broadcast shape, input's dtype, any strides (may be `input`
//          or `other` when that operand has the broadcast shape: in place);
//          allocated contiguous when omitted.
class Add : public BinaryElementwise {
 public:
  static constexpr const char* kName = "add";
  static constexpr int kNumPositional = 2;
  // Outputs that may be exactly these inputs (in place); any other overlap
  // is a ValueError (core/overlap.h).
  static constexpr const char* kAliases[] = {"out=input", "out=other"};

  // The call's arguments, in the constructor's order. Slots take them as
  // one struct: a new parameter touches this header and the slots that
  // read it.
  struct Args {
    const Tensor& input;
    const Tensor& other;
    double alpha;
    const std::optional<Tensor>& out;
  };

  Add(const Tensor& input, const Tensor& other, double alpha = 1.0,
      const std::optional<Tensor>& out = std::nullopt)
      : BinaryElementwise(kName, input, other, out),
        alpha_(AlphaFor(dtype_, alpha)),
        alpha_is_one_(alpha == 1) {}

  explicit Add(const Args& args)
      : Add(args.input, args.other, args.alpha, args.out) {}

  virtual void operator()(const Handle& handle, const Args& args) const = 0;

  static TensorMeta DefaultOut(const Tensor& input, const Tensor& other,
                               double /*alpha*/) {
    return BinaryElementwise::DefaultOut(input, other);
  }

 protected:
  // alpha as the kernels apply it: rounded to a float dtype, an exact
  // integer for integer dtypes. alpha_is_one_: the plain sum (the existing
  // fast paths; fma(1, b, a) is a + b anyway).
  double alpha_;
  bool alpha_is_one_;

 private:
  static double AlphaFor(DataType dtype, double alpha) {
    if (IsFloatingPoint(dtype)) {
      // torch's checked conversion: finite values beyond the dtype's
      // largest overflow; inf and NaN pass.
      double largest = std::numeric_limits<double>::max();
      if (dtype == DataType::kFloat16) largest = 65504.0;
      if (dtype == DataType::kBFloat16) largest = 0x1.fep127;
      if (dtype == DataType::kFloat32) {
        largest = std::numeric_limits<float>::max();
      }
      POLYOPS_CHECK(
          std::isnan(alpha) || std::isinf(alpha) || std::fabs(alpha) <= largest,
          "polyops.add: alpha must be at most ", largest,
          " in magnitude (or inf or nan) for ", DataTypeName(dtype),
          " tensors, got ", alpha);
      const float single = static_cast<float>(alpha);
      switch (dtype) {
        case DataType::kFloat16:
          return ToFloat(ToHalf(single));
        case DataType::kBFloat16:
          return ToFloat(ToBFloat16(single));
        case DataType::kFloat32:
          return single;
        default:
          return alpha;
      }
    }
    int64_t low = 0;
    int64_t high = 0;
    switch (dtype) {
      case DataType::kInt8:
        low = INT8_MIN, high = INT8_MAX;
        break;
      case DataType::kInt16:
        low = INT16_MIN, high = INT16_MAX;
        break;
      case DataType::kInt32:
        low = INT32_MIN, high = INT32_MAX;
        break;
      case DataType::kUInt8:
        low = -UINT8_MAX, high = UINT8_MAX;
        break;
      default:  // int64: the integers a float64 holds exactly
        low = -(int64_t{1} << 53) + 1, high = (int64_t{1} << 53) - 1;
        break;
    }
    POLYOPS_CHECK(alpha == std::trunc(alpha) && alpha >= low && alpha <= high,
                  "polyops.add: alpha must be an integer in [", low, ", ", high,
                  "] for ", DataTypeName(dtype), " tensors, got ",
                  std::setprecision(17), alpha);
    return alpha;
  }
};

}  // namespace polyops

#endif  // POLYOPS_BASE_ADD_H_
