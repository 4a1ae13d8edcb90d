#ifndef POLYOPS_BASE_RMS_NORM_H_
#define POLYOPS_BASE_RMS_NORM_H_

#include <cmath>
#include <optional>

#include "core/checks.h"
#include "core/elementwise_layout.h"
#include "core/handle.h"
#include "core/instance_cache.h"

namespace polyops {

// rms_norm(input, weight, eps=1e-6, *, out=None) -> Tensor
//
// out = input / sqrt(mean(input**2, -1) + eps) * weight over the last dim,
// accumulated in float32 (float16/bfloat16 inputs compute in float32).
//   input:  [..., hidden], float16, bfloat16 or float32; leading dims may
//           have any strides (e.g. a slice of a wider buffer), the last dim
//           must have stride 1.
//   weight: [hidden], input's dtype, contiguous.
//   eps:    >= 0.
//   out:    input's shape and dtype, last dim stride 1; allocated
//           contiguous when omitted.
class RmsNorm : public OperatorBase {
 public:
  static constexpr const char* kName = "rms_norm";
  static constexpr int kNumPositional = 3;
  // Outputs that may be exactly these inputs (in place); any other overlap
  // is a ValueError (core/overlap.h).
  static constexpr const char* kAliases[] = {"out=input"};

  // The call's arguments, in the constructor's order. Slots take them as
  // one struct: a new parameter touches this header and the slots that
  // read it.
  struct Args {
    const Tensor& input;
    const Tensor& weight;
    double eps;
    const std::optional<Tensor>& out;
  };

  RmsNorm(const Tensor& input, const Tensor& weight, double eps = 1e-6,
          const std::optional<Tensor>& out = std::nullopt) {
    const Tensor& output = RequireOutput(kName, "out", out);
    CheckMinDims(kName, "input", input, 1);
    CheckFloatDtype(kName, "input", input);
    CheckSameDtype(kName, "weight", weight, "input", input);
    CheckSameDtype(kName, "out", output, "input", input);
    CheckSameShape(kName, "out", output, "input", input);
    POLYOPS_CHECK(weight.ndim() == 1 && weight.size(0) == input.size(-1),
                  "polyops.rms_norm: weight must have shape [", input.size(-1),
                  "] (the last dim of input), got ", weight.ShapeString());
    CheckContiguous(kName, "weight", weight);
    CheckLastDimContiguous(kName, "input", input);
    CheckLastDimContiguous(kName, "out", output);
    POLYOPS_CHECK(eps >= 0 && std::isfinite(eps),
                  "polyops.rms_norm: eps must be finite and >= 0, got ", eps);
    hidden_ = input.size(-1);
    const int64_t* strides[2] = {output.strides(), input.strides()};
    rows_ =
        ElementwiseLayout<2>::Make(input.ndim() - 1, input.shape(), strides);
    dtype_ = input.dtype();
  }

  explicit RmsNorm(const Args& args)
      : RmsNorm(args.input, args.weight, args.eps, args.out) {}

  virtual void operator()(const Handle& handle, const Args& args) const = 0;

  static TensorMeta DefaultOut(const Tensor& input, const Tensor& /*weight*/,
                               double /*eps*/) {
    return MetaLike(input);
  }

 protected:
  int64_t hidden_ = 0;
  // Rows = the leading dims, operands: out, input.
  ElementwiseLayout<2> rows_;
  DataType dtype_ = DataType::kFloat32;
};

}  // namespace polyops

#endif  // POLYOPS_BASE_RMS_NORM_H_
