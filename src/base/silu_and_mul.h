#ifndef POLYOPS_BASE_SILU_AND_MUL_H_
#define POLYOPS_BASE_SILU_AND_MUL_H_

#include <algorithm>
#include <optional>

#include "core/checks.h"
#include "core/elementwise_layout.h"
#include "core/handle.h"
#include "core/instance_cache.h"

namespace polyops {

// silu_and_mul(input, *, out=None) -> Tensor
//
// vLLM's activation: with d = input.shape[-1] // 2,
// out = silu(input[..., :d]) * input[..., d:], computed in float32.
// NaN and inf as torch: silu(-inf) = -inf / (1 + inf) = NaN, silu(inf) =
// inf, silu(NaN) = NaN, and the product is IEEE (0 * inf = NaN).
//   input: [..., 2*d], float16, bfloat16 or float32, any strides.
//   out:   [..., d], input's dtype, any strides; allocated contiguous when
//          omitted.
class SiluAndMul : public OperatorBase {
 public:
  static constexpr const char* kName = "silu_and_mul";
  static constexpr int kNumPositional = 1;

  // The call's arguments, in the constructor's order. Slots take them as
  // one struct: a new parameter touches this header and the slots that
  // read it.
  struct Args {
    const Tensor& input;
    const std::optional<Tensor>& out;
  };

  explicit SiluAndMul(const Tensor& input,
                      const std::optional<Tensor>& out = std::nullopt) {
    const Tensor& output = RequireOutput(kName, "out", out);
    CheckMinDims(kName, "input", input, 1);
    CheckFloatDtype(kName, "input", input);
    CheckSameDtype(kName, "out", output, "input", input);
    POLYOPS_CHECK(input.size(-1) % 2 == 0,
                  "polyops.silu_and_mul: the last dim of input must be even "
                  "(gate and up halves), got shape ",
                  input.ShapeString());
    const TensorMeta expected = DefaultOut(input);
    POLYOPS_CHECK(output.ndim() == expected.ndim &&
                      std::equal(expected.shape, expected.shape + expected.ndim,
                                 output.shape()),
                  "polyops.silu_and_mul: out must have shape ",
                  Tensor::DimsString(expected.shape, expected.ndim),
                  " (input's with the last dim halved), got ",
                  output.ShapeString());
    // Operands: out, gate half, up half (same strides as the gate half; the
    // up half starts up_offset_ elements later).
    const int64_t* strides[3] = {output.strides(), input.strides(),
                                 input.strides()};
    layout_ =
        ElementwiseLayout<3>::Make(output.ndim(), output.shape(), strides);
    up_offset_ = output.size(-1) * input.stride(-1);
    dtype_ = input.dtype();
  }

  explicit SiluAndMul(const Args& args) : SiluAndMul(args.input, args.out) {}

  virtual void operator()(const Handle& handle, const Args& args) const = 0;

  static TensorMeta DefaultOut(const Tensor& input) {
    // Called before validation: must be safe for any input.
    TensorMeta meta = MetaLike(input);
    if (meta.ndim > 0) meta.shape[meta.ndim - 1] /= 2;
    return meta;
  }

 protected:
  ElementwiseLayout<3> layout_;
  int64_t up_offset_ = 0;
  DataType dtype_ = DataType::kFloat32;
};

}  // namespace polyops

#endif  // POLYOPS_BASE_SILU_AND_MUL_H_
