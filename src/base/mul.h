#ifndef POLYOPS_BASE_MUL_H_
#define POLYOPS_BASE_MUL_H_

#include "base/binary_elementwise.h"
#include "core/handle.h"

namespace polyops {

// mul(input, other, *, out=None) -> Tensor
//
// out = input * other, with `other` broadcast to input's shape (torch rules).
//   input: any shape, any strides; float16, bfloat16, float32, float64,
//          int8/16/32/64 or uint8 (integers wrap on overflow).
//   other: broadcastable to input, same dtype.
//   out:   input's shape and dtype, any strides (may be `input`, in place);
//          allocated contiguous when omitted.
class Mul : public BinaryElementwise {
 public:
  static constexpr const char* kName = "mul";
  static constexpr int kNumPositional = 2;
  // Outputs that may be exactly these inputs (in place); any other overlap
  // is a ValueError (core/overlap.h).
  static constexpr const char* kAliases[] = {"out=input", "out=other"};

  Mul(const Tensor& input, const Tensor& other,
      const std::optional<Tensor>& out = std::nullopt)
      : BinaryElementwise(kName, input, other, out) {}

  virtual void operator()(const Handle& handle, const Tensor& input,
                          const Tensor& other,
                          const std::optional<Tensor>& out) const = 0;
};

}  // namespace polyops

#endif  // POLYOPS_BASE_MUL_H_
