// Shared validation of add and mul (not an op: it has no kName).
#ifndef POLYOPS_BASE_BINARY_ELEMENTWISE_H_
#define POLYOPS_BASE_BINARY_ELEMENTWISE_H_

#include <optional>

#include "core/checks.h"
#include "core/elementwise_layout.h"
#include "core/instance_cache.h"

namespace polyops {

// out = input (op) other, input and other broadcast to one shape
// torch-style. Any strides; `out` may be `input` or `other` itself (in
// place) when that operand already has the broadcast shape.
class BinaryElementwise : public OperatorBase {
 public:
  // The broadcast shape of input and other, input's dtype. Runs before
  // validation: shapes that do not broadcast yield input's meta, which the
  // constructor then rejects.
  static TensorMeta DefaultOut(const Tensor& input, const Tensor& other) {
    TensorMeta meta = MetaLike(input);
    int ndim = 0;
    int64_t shape[kMaxDims];
    if (BroadcastShapes(input.ndim(), input.shape(), other.ndim(),
                        other.shape(), &ndim, shape)) {
      meta.ndim = ndim;
      for (int d = 0; d < ndim; ++d) meta.shape[d] = shape[d];
    }
    return meta;
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
    int ndim = 0;
    int64_t shape[kMaxDims];
    POLYOPS_CHECK(BroadcastShapes(input.ndim(), input.shape(), other.ndim(),
                                  other.shape(), &ndim, shape),
                  "polyops.", op, ": input of shape ", input.ShapeString(),
                  " and other of shape ", other.ShapeString(),
                  " do not broadcast (right-aligned, each pair of dims must "
                  "be equal or one of them 1)");
    bool shape_ok = output.ndim() == ndim;
    for (int d = 0; shape_ok && d < ndim; ++d) {
      shape_ok = output.size(d) == shape[d];
    }
    POLYOPS_CHECK(shape_ok, "polyops.", op,
                  ": out must have the broadcast shape of input and other ",
                  Tensor::DimsString(shape, ndim), ", got ",
                  output.ShapeString());
    int64_t input_strides[kMaxDims];
    int64_t other_strides[kMaxDims];
    BroadcastStrides(input.ndim(), input.shape(), input.strides(), ndim,
                     input_strides);
    BroadcastStrides(other.ndim(), other.shape(), other.strides(), ndim,
                     other_strides);
    const int64_t* strides[3] = {output.strides(), input_strides,
                                 other_strides};
    layout_ = ElementwiseLayout<3>::Make(ndim, shape, strides);
    dtype_ = input.dtype();
  }

  // Operands in order: out, input, other (stride 0 where they broadcast).
  ElementwiseLayout<3> layout_;
  DataType dtype_;
};

}  // namespace polyops

#endif  // POLYOPS_BASE_BINARY_ELEMENTWISE_H_
