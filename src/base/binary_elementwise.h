// Shared validation of add and mul (not an op: it has no kName).
#ifndef POLYOPS_BASE_BINARY_ELEMENTWISE_H_
#define POLYOPS_BASE_BINARY_ELEMENTWISE_H_

#include <optional>

#include "core/checks.h"
#include "core/elementwise_layout.h"
#include "core/instance_cache.h"

namespace polyops {

// out = input (op) other, `other` broadcast to input's shape torch-style.
// Any strides; `out` may be `input` itself (in place).
class BinaryElementwise : public OperatorBase {
 public:
  static TensorMeta DefaultOut(const Tensor& input, const Tensor& /*other*/) {
    return MetaLike(input);
  }

 protected:
  BinaryElementwise(const char* op, const Tensor& input, const Tensor& other,
                    const std::optional<Tensor>& out) {
    const Tensor& output = RequireOutput(op, "out", out);
    POLYOPS_CHECK_T(input.dtype() != DataType::kBool, NotImplemented,
                    "polyops.", op,
                    " is not supported for bool tensors because it has no "
                    "boolean arithmetic; cast to an integer dtype first");
    CheckSameDtype(op, "other", other, "input", input);
    CheckSameDtype(op, "out", output, "input", input);
    CheckSameShape(op, "out", output, "input", input);
    POLYOPS_CHECK(other.ndim() <= input.ndim(), "polyops.", op,
                  ": other of shape ", other.ShapeString(),
                  " cannot be broadcast to input's shape ",
                  input.ShapeString());
    // Right-align other's dims; a size-1 (or missing) dim gets stride 0.
    int64_t other_strides[kMaxDims] = {};
    const int offset = input.ndim() - other.ndim();
    for (int d = 0; d < other.ndim(); ++d) {
      const int64_t size = other.shape()[d];
      POLYOPS_CHECK(size == input.shape()[d + offset] || size == 1, "polyops.",
                    op, ": other of shape ", other.ShapeString(),
                    " cannot be broadcast to input's shape ",
                    input.ShapeString());
      other_strides[d + offset] = size == 1 ? 0 : other.strides()[d];
    }
    const int64_t* strides[3] = {output.strides(), input.strides(),
                                 other_strides};
    layout_ = ElementwiseLayout<3>::Make(input.ndim(), input.shape(), strides);
    dtype_ = input.dtype();
  }

  // Operands in order: out, input, other (broadcast strides).
  ElementwiseLayout<3> layout_;
  DataType dtype_;
};

}  // namespace polyops

#endif  // POLYOPS_BASE_BINARY_ELEMENTWISE_H_
