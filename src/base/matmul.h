#ifndef POLYOPS_BASE_MATMUL_H_
#define POLYOPS_BASE_MATMUL_H_

#include <algorithm>
#include <optional>

#include "base/gemm_base.h"
#include "core/elementwise_layout.h"
#include "core/handle.h"

namespace polyops {

// matmul(input, other, *, out=None) -> Tensor
//
// out = input @ other, as torch.matmul: [m, k] @ [k, n] -> [m, n]; a 1-D
// input is a row vector and a 1-D other a column vector whose dim is
// dropped from the result ([k] @ [k] -> a 0-d dot product, [k] @ [k, n] ->
// [n], [m, k] @ [k] -> [m]); leading dims beyond the last two are batch
// dims, broadcast between the operands as torch does ([2, 1, m, k] @
// [3, k, n] -> [2, 3, m, n]; a 1-D or 2-D operand is shared by the other's
// whole batch). Every dtype accumulates in float32 and rounds the result
// once (CPU: own AVX-512 kernels or OpenBLAS sgemm, see
// docs/backends/cpu_gemm.md).
//   input, other: at least 1-D, float16, bfloat16 or float32, one dtype;
//                 each matrix row- or column-major (unit stride in one of
//                 its last two dims, e.g. x.t()), a vector any positive
//                 stride; batch dims any strides.
//   out:          the result's shape and dtype, unit stride in one of its
//                 last two dims, not overlapping input or other; allocated
//                 contiguous when omitted.
// Batch dims that merge into one strided batch (contiguous ones, or dims
// an operand broadcasts with stride 0) run as one batched product; others
// (e.g. [2, 1] against [1, 3]) as one batched product per outer index.
class Matmul : public GemmBase {
 public:
  static constexpr const char* kName = "matmul";
  static constexpr int kNumPositional = 2;

  // The call's arguments, in the constructor's order. Slots take them as
  // one struct: a new parameter touches this header and the slots that
  // read it.
  struct Args {
    const Tensor& input;
    const Tensor& other;
    const std::optional<Tensor>& out;
  };

  Matmul(const Tensor& input, const Tensor& other,
         const std::optional<Tensor>& out = std::nullopt) {
    const Tensor& output = RequireOutput(kName, "out", out);
    CheckFloatDtype(kName, "input", input);
    CheckSameDtype(kName, "other", other, "input", input);
    CheckSameDtype(kName, "out", output, "input", input);
    POLYOPS_CHECK(input.ndim() >= 1 && other.ndim() >= 1,
                  "polyops.matmul: input and other must have at least 1 dim "
                  "each, got shapes ",
                  input.ShapeString(), " and ", other.ShapeString());
    const bool row_vector = input.ndim() == 1;
    const bool column_vector = other.ndim() == 1;
    GemmLayout& l = layout_;
    l.m = row_vector ? 1 : input.size(-2);
    l.k = input.size(-1);
    l.n = column_vector ? 1 : other.size(-1);
    const int64_t k_other = column_vector ? other.size(0) : other.size(-2);
    POLYOPS_CHECK(l.k == k_other, "polyops.matmul: other must have as many ",
                  column_vector ? "elements" : "rows", " as input has ",
                  row_vector ? "elements" : "columns", " (", l.k,
                  "), got input of shape ", input.ShapeString(),
                  " and other of shape ", other.ShapeString());
    const int input_batch = std::max(input.ndim() - 2, 0);
    const int other_batch = std::max(other.ndim() - 2, 0);
    int batch_ndim = 0;
    int64_t batch_shape[kMaxDims];
    POLYOPS_CHECK(BroadcastShapes(input_batch, input.shape(), other_batch,
                                  other.shape(), &batch_ndim, batch_shape),
                  "polyops.matmul: the batch dims of input ",
                  Tensor::DimsString(input.shape(), input_batch), " and other ",
                  Tensor::DimsString(other.shape(), other_batch),
                  " do not broadcast (right-aligned, each pair of dims must "
                  "be equal or one of them 1)");
    const TensorMeta expected = DefaultOut(input, other);
    bool shape_ok = output.ndim() == expected.ndim;
    for (int d = 0; shape_ok && d < expected.ndim; ++d) {
      shape_ok = output.size(d) == expected.shape[d];
    }
    POLYOPS_CHECK(shape_ok, "polyops.matmul: out must have shape ",
                  Tensor::DimsString(expected.shape, expected.ndim), ", got ",
                  output.ShapeString());

    // The matrices; a vector as the [1, k] or [k, 1] view unsqueeze gives,
    // and out without the dims a vector drops.
    const int64_t input_col = input.stride(-1);
    l.a = GemmMatrix{0, row_vector ? l.k * input_col : input.stride(-2),
                     input_col};
    const int64_t other_row = other.stride(column_vector ? 0 : -2);
    l.b = GemmMatrix{0, other_row, column_vector ? 1 : other.stride(-1)};
    const int out_ndim = output.ndim();
    const int64_t out_col = column_vector ? 1 : output.stride(out_ndim - 1);
    const int64_t out_row =
        row_vector ? l.n * out_col
                   : output.stride(out_ndim - (column_vector ? 1 : 2));
    l.out = GemmMatrix{0, out_row, out_col};

    // The batch dims, merged where all three operands allow it: the last
    // merged dim is the strided batch, any others stay outer.
    int64_t input_strides[kMaxDims];
    int64_t other_strides[kMaxDims];
    BroadcastStrides(input_batch, input.shape(), input.strides(), batch_ndim,
                     input_strides);
    BroadcastStrides(other_batch, other.shape(), other.strides(), batch_ndim,
                     other_strides);
    const int64_t* strides[3] = {output.strides(), input_strides,
                                 other_strides};
    const ElementwiseLayout<3> batches =
        ElementwiseLayout<3>::Make(batch_ndim, batch_shape, strides);
    const int last = batches.ndim - 1;
    l.batch = batches.shape[last];
    if (l.batch > 1) {
      l.out.batch_stride = batches.strides[0][last];
      l.a.batch_stride = batches.strides[1][last];
      l.b.batch_stride = batches.strides[2][last];
    }
    if (last > 0) {
      l.outer.ndim = last;
      l.outer.numel = batches.numel / l.batch;
      for (int d = 0; d < last; ++d) {
        l.outer.shape[d] = batches.shape[d];
        for (int k = 0; k < 3; ++k) {
          l.outer.strides[k][d] = batches.strides[k][d];
        }
      }
    }
    Finish(kName, "input", input, "other", other, output);
  }

  explicit Matmul(const Args& args)
      : Matmul(args.input, args.other, args.out) {}

  virtual void operator()(const Handle& handle, const Args& args) const = 0;

  // torch.matmul's result shape. Runs before validation: anything it cannot
  // read yields a meta the constructor then rejects.
  static TensorMeta DefaultOut(const Tensor& input, const Tensor& other) {
    TensorMeta meta = MetaLike(input);
    if (input.ndim() < 1 || other.ndim() < 1) return meta;
    int ndim = 0;
    int64_t shape[kMaxDims];
    if (!BroadcastShapes(std::max(input.ndim() - 2, 0), input.shape(),
                         std::max(other.ndim() - 2, 0), other.shape(), &ndim,
                         shape)) {
      return meta;
    }
    if (input.ndim() >= 2) shape[ndim++] = input.size(-2);
    if (other.ndim() >= 2) shape[ndim++] = other.size(-1);
    meta.ndim = ndim;
    for (int d = 0; d < ndim; ++d) meta.shape[d] = shape[d];
    return meta;
  }
};

}  // namespace polyops

#endif  // POLYOPS_BASE_MATMUL_H_
