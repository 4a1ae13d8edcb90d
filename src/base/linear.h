#ifndef POLYOPS_BASE_LINEAR_H_
#define POLYOPS_BASE_LINEAR_H_

#include <optional>

#include "base/gemm_base.h"
#include "core/elementwise_layout.h"
#include "core/handle.h"

namespace polyops {

// linear(input, weight, bias=None, *, out=None) -> Tensor
//
// out = input @ weight.T + bias, as torch.nn.functional.linear; every
// dtype accumulates in float32 and rounds the result once (CPU: own AVX-512
// kernels or OpenBLAS sgemm, see docs/backends/cpu_gemm.md).
//   input:  [..., in_features], float16, bfloat16 or float32; the leading
//           dims must merge into at most two (batch, rows) dims, e.g. any
//           contiguous tensor or a slice x[:, :s] of one; each matrix row-
//           or column-major (unit stride in one of its last two dims).
//   weight: [out_features, in_features], input's dtype, row- or
//           column-major.
//   bias:   [out_features], input's dtype, any stride.
//   out:    [..., out_features], input's dtype, unit stride in one of its
//           last two dims, not overlapping input or weight; allocated
//           contiguous when omitted.
class Linear : public GemmBase {
 public:
  static constexpr const char* kName = "linear";
  static constexpr int kNumPositional = 3;

  // The call's arguments, in the constructor's order. Slots take them as
  // one struct: a new parameter touches this header and the slots that
  // read it.
  struct Args {
    const Tensor& input;
    const Tensor& weight;
    const std::optional<Tensor>& bias;
    const std::optional<Tensor>& out;
  };

  Linear(const Tensor& input, const Tensor& weight,
         const std::optional<Tensor>& bias = std::nullopt,
         const std::optional<Tensor>& out = std::nullopt) {
    const Tensor& output = RequireOutput(kName, "out", out);
    CheckFloatDtype(kName, "input", input);
    CheckSameDtype(kName, "weight", weight, "input", input);
    CheckSameDtype(kName, "out", output, "input", input);
    CheckMinDims(kName, "input", input, 1);
    POLYOPS_CHECK(weight.ndim() == 2 && weight.size(1) == input.size(-1),
                  "polyops.linear: weight must have shape [out_features, ",
                  input.size(-1), "] (in_features = input's last dim), got ",
                  weight.ShapeString());
    GemmLayout& l = layout_;
    l.k = weight.size(1);
    l.n = weight.size(0);
    const TensorMeta expected = DefaultOut(input, weight, bias);
    const std::string expected_shape =
        Tensor::DimsString(expected.shape, expected.ndim);
    bool shape_ok = output.ndim() == expected.ndim;
    for (int d = 0; shape_ok && d < expected.ndim; ++d) {
      shape_ok = output.size(d) == expected.shape[d];
    }
    POLYOPS_CHECK(shape_ok, "polyops.linear: out must have shape ",
                  expected_shape, ", got ", output.ShapeString());
    // weight [n, k] read as its transpose [k, n], shared by every batch.
    l.b = GemmMatrix{0, weight.stride(1), weight.stride(0)};
    l.a.col_stride = input.stride(-1);
    l.out.col_stride = output.stride(-1);
    if (input.ndim() == 1) {
      l.m = 1;
    } else {
      // The leading dims, merged jointly for input and out: one dim is the
      // rows, two are (batch, rows).
      const int64_t* strides[2] = {output.strides(), input.strides()};
      const ElementwiseLayout<2> rows =
          ElementwiseLayout<2>::Make(input.ndim() - 1, input.shape(), strides);
      POLYOPS_CHECK_T(rows.ndim <= 2, NotImplemented,
                      "polyops.linear is not supported for input of shape ",
                      input.ShapeString(), " with strides ",
                      input.StridesString(), " (out strides ",
                      output.StridesString(),
                      ") because its leading dims do not merge into two "
                      "(batch, rows); call .contiguous() first");
      l.m = rows.shape[rows.ndim - 1];
      l.a.row_stride = rows.strides[1][rows.ndim - 1];
      l.out.row_stride = rows.strides[0][rows.ndim - 1];
      if (rows.ndim == 2) {
        l.batch = rows.shape[0];
        l.a.batch_stride = rows.strides[1][0];
        l.out.batch_stride = rows.strides[0][0];
      }
    }
    if (bias) {
      CheckSameDtype(kName, "bias", *bias, "input", input);
      POLYOPS_CHECK(bias->ndim() == 1 && bias->size(0) == l.n,
                    "polyops.linear: bias must have shape [", l.n,
                    "] (out_features), got ", bias->ShapeString());
      l.has_c = true;
      l.c = GemmMatrix{0, 0, l.n == 1 ? 0 : bias->stride(0)};
    }
    SetScalars(kName, 1.0, bias ? 1.0 : 0.0);
    Finish(kName, "input", input, "weight", weight, output);
  }

  explicit Linear(const Args& args)
      : Linear(args.input, args.weight, args.bias, args.out) {}

  virtual void operator()(const Handle& handle, const Args& args) const = 0;

  static TensorMeta DefaultOut(const Tensor& input, const Tensor& weight,
                               const std::optional<Tensor>& /*bias*/) {
    TensorMeta meta = MetaLike(input);
    if (input.ndim() >= 1 && weight.ndim() >= 1) {
      meta.shape[input.ndim() - 1] = weight.size(0);
    }
    return meta;
  }
};

}  // namespace polyops

#endif  // POLYOPS_BASE_LINEAR_H_
