#ifndef POLYOPS_BASE_CAUSAL_SOFTMAX_H_
#define POLYOPS_BASE_CAUSAL_SOFTMAX_H_

#include <optional>

#include "core/checks.h"
#include "core/elementwise_layout.h"
#include "core/handle.h"
#include "core/instance_cache.h"

namespace polyops {

// causal_softmax(input, *, out=None) -> Tensor
//
// Softmax over the last dim of attention scores under a causal mask aligned
// to the end: for input [..., q, k], row i (of q) sees keys j <= i + (k - q)
// and masked keys get probability 0, so the last query row sees every key.
// Computed in float32. When q > k, the first q - k rows see no key at all:
// such a fully masked row is defined as all zeros (not NaN).
// NaN and inf as torch.softmax over the visible keys: a NaN or +inf makes
// the row NaN, a -inf gets exactly 0, and a row whose visible keys are all
// -inf is NaN (0 / 0). Masked keys are never read.
//   input: [..., q, k] with at least 2 dims, float16, bfloat16 or float32;
//          leading dims may have any strides, the last dim must have
//          stride 1.
//   out:   input's shape and dtype, last dim stride 1; allocated contiguous
//          when omitted. May be input itself (in place).
class CausalSoftmax : public OperatorBase {
 public:
  static constexpr const char* kName = "causal_softmax";
  static constexpr int kNumPositional = 1;
  // Outputs that may be exactly these inputs (in place); any other overlap
  // is a ValueError (core/overlap.h).
  static constexpr const char* kAliases[] = {"out=input"};

  // The call's arguments, in the constructor's order. Slots take them as
  // one struct: a new parameter touches this header and the slots that
  // read it.
  struct Args {
    const Tensor& input;
    const std::optional<Tensor>& out;
  };

  explicit CausalSoftmax(const Tensor& input,
                         const std::optional<Tensor>& out = std::nullopt) {
    const Tensor& output = RequireOutput(kName, "out", out);
    CheckMinDims(kName, "input", input, 2);
    CheckFloatDtype(kName, "input", input);
    CheckSameDtype(kName, "out", output, "input", input);
    CheckSameShape(kName, "out", output, "input", input);
    CheckLastDimContiguous(kName, "input", input);
    CheckLastDimContiguous(kName, "out", output);
    queries_ = input.size(-2);
    keys_ = input.size(-1);
    const int64_t* strides[2] = {output.strides(), input.strides()};
    rows_ =
        ElementwiseLayout<2>::Make(input.ndim() - 1, input.shape(), strides);
    dtype_ = input.dtype();
  }

  explicit CausalSoftmax(const Args& args)
      : CausalSoftmax(args.input, args.out) {}

  virtual void operator()(const Handle& handle, const Args& args) const = 0;

  static TensorMeta DefaultOut(const Tensor& input) { return MetaLike(input); }

 protected:
  // Keys visible to the row at linear position `row` of the leading dims
  // (its query index is row % q): 0 for a fully masked row.
  int64_t VisibleKeys(int64_t row) const {
    const int64_t last = row % queries_ + (keys_ - queries_);
    return last < 0 ? 0 : (last >= keys_ ? keys_ : last + 1);
  }

  int64_t queries_ = 0;
  int64_t keys_ = 0;
  // Rows = the leading dims (their row-major order keeps the query index
  // as row % q), operands: out, input.
  ElementwiseLayout<2> rows_;
  DataType dtype_ = DataType::kFloat32;
};

}  // namespace polyops

#endif  // POLYOPS_BASE_CAUSAL_SOFTMAX_H_
