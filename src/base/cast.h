#ifndef POLYOPS_BASE_CAST_H_
#define POLYOPS_BASE_CAST_H_

#include <optional>

#include "core/checks.h"
#include "core/elementwise_layout.h"
#include "core/handle.h"
#include "core/instance_cache.h"

namespace polyops {

// cast(input, dtype, *, out=None) -> Tensor
//
// out = input converted to `dtype` (a torch.dtype) as torch's .to() does:
// float -> float16/bfloat16 rounds to nearest even; float -> integer
// truncates toward zero (out-of-range values are undefined, as in torch);
// anything -> bool is `!= 0`.
//   input: any shape and strides; bool, int8/16/32/64, uint8, float16,
//          bfloat16, float32 or float64.
//   out:   input's shape with dtype `dtype`, any strides; allocated
//          contiguous when omitted.
class Cast : public OperatorBase {
 public:
  static constexpr const char* kName = "cast";
  static constexpr int kNumPositional = 2;
  // Outputs that may be exactly these inputs (in place); any other overlap
  // is a ValueError (core/overlap.h).
  static constexpr const char* kAliases[] = {"out=input"};

  // The call's arguments, in the constructor's order. Slots take them as
  // one struct: a new parameter touches this header and the slots that
  // read it.
  struct Args {
    const Tensor& input;
    DataType dtype;
    const std::optional<Tensor>& out;
  };

  Cast(const Tensor& input, DataType dtype,
       const std::optional<Tensor>& out = std::nullopt) {
    const Tensor& output = RequireOutput(kName, "out", out);
    CheckSameShape(kName, "out", output, "input", input);
    POLYOPS_CHECK(output.dtype() == dtype, "polyops.cast: out must have dtype ",
                  DataTypeName(dtype), " (the requested dtype), got ",
                  DataTypeName(output.dtype()));
    const int64_t* strides[2] = {output.strides(), input.strides()};
    layout_ = ElementwiseLayout<2>::Make(input.ndim(), input.shape(), strides);
    from_ = input.dtype();
    to_ = dtype;
  }

  explicit Cast(const Args& args) : Cast(args.input, args.dtype, args.out) {}

  virtual void operator()(const Handle& handle, const Args& args) const = 0;

  static TensorMeta DefaultOut(const Tensor& input, DataType dtype) {
    TensorMeta meta = MetaLike(input);
    meta.dtype = dtype;
    return meta;
  }

 protected:
  // Operands: out, input.
  ElementwiseLayout<2> layout_;
  DataType from_ = DataType::kFloat32;
  DataType to_ = DataType::kFloat32;
};

}  // namespace polyops

#endif  // POLYOPS_BASE_CAST_H_
