#ifndef POLYOPS_BASE_SWIGLU_H_
#define POLYOPS_BASE_SWIGLU_H_

#include <optional>

#include "core/checks.h"
#include "core/elementwise_layout.h"
#include "core/handle.h"
#include "core/instance_cache.h"

namespace polyops {

// swiglu(input, gate, *, out=None) -> Tensor
//
// out = input * silu(gate), silu(g) = g / (1 + exp(-g)), computed in float32.
// NaN and inf as torch: silu(-inf) = NaN, silu(inf) = inf, silu(NaN) = NaN,
// and the product is IEEE (0 * inf = NaN).
//   input, gate: same shape, any strides; float16, bfloat16 or float32.
//   out:         input's shape and dtype, any strides; allocated
//                contiguous when omitted.
class Swiglu : public OperatorBase {
 public:
  static constexpr const char* kName = "swiglu";
  static constexpr int kNumPositional = 2;
  // Outputs that may be exactly these inputs (in place); any other overlap
  // is a ValueError (core/overlap.h).
  static constexpr const char* kAliases[] = {"out=input", "out=gate"};

  // The call's arguments, in the constructor's order. Slots take them as
  // one struct: a new parameter touches this header and the slots that
  // read it.
  struct Args {
    const Tensor& input;
    const Tensor& gate;
    const std::optional<Tensor>& out;
  };

  Swiglu(const Tensor& input, const Tensor& gate,
         const std::optional<Tensor>& out = std::nullopt) {
    const Tensor& output = RequireOutput(kName, "out", out);
    CheckFloatDtype(kName, "input", input);
    CheckSameDtype(kName, "gate", gate, "input", input);
    CheckSameDtype(kName, "out", output, "input", input);
    CheckSameShape(kName, "gate", gate, "input", input);
    CheckSameShape(kName, "out", output, "input", input);
    const int64_t* strides[3] = {output.strides(), input.strides(),
                                 gate.strides()};
    layout_ = ElementwiseLayout<3>::Make(input.ndim(), input.shape(), strides);
    dtype_ = input.dtype();
  }

  explicit Swiglu(const Args& args) : Swiglu(args.input, args.gate, args.out) {}

  virtual void operator()(const Handle& handle, const Args& args) const = 0;

  static TensorMeta DefaultOut(const Tensor& input, const Tensor& /*gate*/) {
    return MetaLike(input);
  }

 protected:
  // Operands: out, input, gate.
  ElementwiseLayout<3> layout_;
  DataType dtype_ = DataType::kFloat32;
};

}  // namespace polyops

#endif  // POLYOPS_BASE_SWIGLU_H_
