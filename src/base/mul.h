#ifndef POLYOPS_BASE_MUL_H_
#define POLYOPS_BASE_MUL_H_

#include "base/binary_elementwise.h"
#include "core/handle.h"

namespace polyops {

// mul(input, other, *, out=None) -> Tensor
//
// out = input * other, input and other broadcast to one shape (torch rules:
// [3, 1] * [1, 5] -> [3, 5], [5] * [2, 3, 5] -> [2, 3, 5]); float16/bfloat16
// compute in float32 and round once.
//   input: any shape, any strides; float16, bfloat16, float32, float64,
//          int8/16/32/64 or uint8 (integers wrap on overflow).
//   other: input's dtype, any shape that broadcasts with input's.
//   out:   the broadcast shape, input's dtype, any strides (may be `input`
//          or `other` when that operand has the broadcast shape: in place);
//          allocated contiguous when omitted.
class Mul : public BinaryElementwise {
 public:
  static constexpr const char* kName = "mul";
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
    const std::optional<Tensor>& out;
  };

  Mul(const Tensor& input, const Tensor& other,
      const std::optional<Tensor>& out = std::nullopt)
      : BinaryElementwise(kName, input, other, out) {}

  explicit Mul(const Args& args) : Mul(args.input, args.other, args.out) {}

  virtual void operator()(const Handle& handle, const Args& args) const = 0;
};

}  // namespace polyops

#endif  // POLYOPS_BASE_MUL_H_
