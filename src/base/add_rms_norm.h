#ifndef POLYOPS_BASE_ADD_RMS_NORM_H_
#define POLYOPS_BASE_ADD_RMS_NORM_H_

#include <cmath>
#include <optional>

#include "core/checks.h"
#include "core/elementwise_layout.h"
#include "core/handle.h"
#include "core/instance_cache.h"

namespace polyops {

// add_rms_norm(x1, x2, gamma, eps=1e-6, *, y_out=None, x_out=None) -> (y, x)
//
// The residual add fused with rms_norm: x = x1 + x2 (rounded to the dtype),
// y = rms_norm(x, gamma, eps), so y equals rms_norm(x_out) bit for bit.
//   x1, x2: [..., hidden], float16, bfloat16 or float32, same shape; leading
//           dims may have any strides, the last dim must have stride 1.
//   gamma:  [hidden], same dtype, contiguous.
//   y_out, x_out: x1's shape and dtype, last dim stride 1 (x_out may be x1
//           or x2 itself, vLLM's in-place residual update); allocated
//           contiguous when omitted.
class AddRmsNorm : public OperatorBase {
 public:
  static constexpr const char* kName = "add_rms_norm";
  static constexpr int kNumPositional = 4;
  // Outputs that may be exactly these inputs (in place); any other overlap
  // is a ValueError (core/overlap.h).
  static constexpr const char* kAliases[] = {"y_out=x1", "y_out=x2", "x_out=x1",
                                             "x_out=x2"};

  // The call's arguments, in the constructor's order. Slots take them as
  // one struct: a new parameter touches this header and the slots that
  // read it.
  struct Args {
    const Tensor& x1;
    const Tensor& x2;
    const Tensor& gamma;
    double eps;
    const std::optional<Tensor>& y_out;
    const std::optional<Tensor>& x_out;
  };

  AddRmsNorm(const Tensor& x1, const Tensor& x2, const Tensor& gamma,
             double eps = 1e-6,
             const std::optional<Tensor>& y_out = std::nullopt,
             const std::optional<Tensor>& x_out = std::nullopt) {
    const Tensor& y = RequireOutput(kName, "y_out", y_out);
    const Tensor& x = RequireOutput(kName, "x_out", x_out);
    CheckMinDims(kName, "x1", x1, 1);
    CheckFloatDtype(kName, "x1", x1);
    for (auto [name, tensor] :
         {std::pair{"x2", &x2}, std::pair{"gamma", &gamma},
          std::pair{"y_out", &y}, std::pair{"x_out", &x}}) {
      CheckSameDtype(kName, name, *tensor, "x1", x1);
    }
    for (auto [name, tensor] : {std::pair{"x2", &x2}, std::pair{"y_out", &y},
                                std::pair{"x_out", &x}}) {
      CheckSameShape(kName, name, *tensor, "x1", x1);
    }
    POLYOPS_CHECK(gamma.ndim() == 1 && gamma.size(0) == x1.size(-1),
                  "polyops.add_rms_norm: gamma must have shape [", x1.size(-1),
                  "] (the last dim of x1), got ", gamma.ShapeString());
    CheckContiguous(kName, "gamma", gamma);
    for (auto [name, tensor] :
         {std::pair{"x1", &x1}, std::pair{"x2", &x2}, std::pair{"y_out", &y},
          std::pair{"x_out", &x}}) {
      CheckLastDimContiguous(kName, name, *tensor);
    }
    POLYOPS_CHECK(eps >= 0 && std::isfinite(eps),
                  "polyops.add_rms_norm: eps must be finite and >= 0, got ",
                  eps);
    hidden_ = x1.size(-1);
    const int64_t* strides[4] = {y.strides(), x.strides(), x1.strides(),
                                 x2.strides()};
    rows_ = ElementwiseLayout<4>::Make(x1.ndim() - 1, x1.shape(), strides);
    dtype_ = x1.dtype();
  }

  explicit AddRmsNorm(const Args& args)
      : AddRmsNorm(args.x1, args.x2, args.gamma, args.eps, args.y_out,
                   args.x_out) {}

  virtual void operator()(const Handle& handle, const Args& args) const = 0;

  static TensorMeta DefaultYOut(const Tensor& x1, const Tensor& /*x2*/,
                                const Tensor& /*gamma*/, double /*eps*/) {
    return MetaLike(x1);
  }
  static TensorMeta DefaultXOut(const Tensor& x1, const Tensor& /*x2*/,
                                const Tensor& /*gamma*/, double /*eps*/) {
    return MetaLike(x1);
  }

 protected:
  int64_t hidden_ = 0;
  // Rows = the leading dims, operands: y_out, x_out, x1, x2.
  ElementwiseLayout<4> rows_;
  DataType dtype_ = DataType::kFloat32;
};

}  // namespace polyops

#endif  // POLYOPS_BASE_ADD_RMS_NORM_H_
