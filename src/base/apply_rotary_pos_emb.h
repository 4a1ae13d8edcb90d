#ifndef POLYOPS_BASE_APPLY_ROTARY_POS_EMB_H_
#define POLYOPS_BASE_APPLY_ROTARY_POS_EMB_H_

#include <cstdint>
#include <optional>

#include "base/rotary_layout.h"
#include "core/checks.h"
#include "core/handle.h"
#include "core/instance_cache.h"

namespace polyops {

// apply_rotary_pos_emb(query, key, cos, sin, *, is_neox_style=True, ...)
//
// The rotation of rotary_embedding with cos and sin already gathered per
// token: rotary_dim = 2 * cos.shape[-1] and, for a pair (x1, x2) of a head
// (neox style: x[i], x[i + rotary_dim/2]; GPT-J style: x[2i], x[2i + 1]),
//   x1' = x1 * cos[t, i] - x2 * sin[t, i],
//   x2' = x2 * cos[t, i] + x1 * sin[t, i],
// computed in float32; dims past rotary_dim are unchanged.
//   query:    [T, Hq, D] (partial rotary when rotary_dim < D) or [T, Hq * D];
//             with no head_size argument a 2-D query is read as heads of
//             D = rotary_dim (full rotary). float16, bfloat16 or float32;
//             head dim contiguous, other strides free.
//   key:      None, or like query (same head size) with its own head count.
//   cos, sin: [T, rotary_dim // 2], query's dtype or float32 (both the same),
//             last dim contiguous.
//   query_out, key_out: omitted means in place on query / key (key_out is
//             then key, None for key None); given, they take the result
//             (their input's shape and dtype, head dim contiguous), the
//             rotary-free dims are copied, and the inputs are left
//             untouched. key_out must be None when key is None.
// Returns (query_out, key_out).
class ApplyRotaryPosEmb : public OperatorBase {
 public:
  static constexpr const char* kName = "apply_rotary_pos_emb";
  static constexpr int kNumPositional = 4;

  // The call's arguments, in the constructor's order. Slots take them as
  // one struct: a new parameter touches this header and the slots that
  // read it.
  struct Args {
    const Tensor& query;
    const std::optional<Tensor>& key;
    const Tensor& cos;
    const Tensor& sin;
    bool is_neox_style;
    const std::optional<Tensor>& query_out;
    const std::optional<Tensor>& key_out;
  };

  ApplyRotaryPosEmb(const Tensor& query, const std::optional<Tensor>& key,
                    const Tensor& cos, const Tensor& sin,
                    bool is_neox_style = true,
                    const std::optional<Tensor>& query_out = std::nullopt,
                    const std::optional<Tensor>& key_out = std::nullopt) {
    POLYOPS_CHECK(cos.ndim() == 2,
                  "polyops.apply_rotary_pos_emb: cos must be [T, "
                  "rotary_dim // 2], got shape ",
                  cos.ShapeString());
    CheckSameShape(kName, "sin", sin, "cos", cos);
    const int64_t rotary = 2 * cos.size(1);
    POLYOPS_CHECK(rotary > 0,
                  "polyops.apply_rotary_pos_emb: cos must have a non-empty "
                  "last dim, got shape ",
                  cos.ShapeString());
    const int64_t head_size = query.ndim() == 3 ? query.size(2) : rotary;
    POLYOPS_CHECK(rotary <= head_size,
                  "polyops.apply_rotary_pos_emb: rotary_dim = 2 * "
                  "cos.shape[-1] = ",
                  rotary, " must not exceed the head size ", head_size,
                  " of query ", query.ShapeString());
    geometry_.head_size = head_size;
    geometry_.rotary_dim = rotary;
    geometry_.neox = is_neox_style;
    ReadRotaryOperands(kName, geometry_, query, key, query_out, key_out);
    POLYOPS_CHECK(cos.size(0) == geometry_.tokens,
                  "polyops.apply_rotary_pos_emb: cos must have ",
                  geometry_.tokens, " rows (query's tokens), got shape ",
                  cos.ShapeString());
    CheckRotaryTableDtype(kName, "cos", cos, query);
    CheckSameDtype(kName, "sin", sin, "cos", cos);
    CheckLastDimContiguous(kName, "cos", cos);
    CheckLastDimContiguous(kName, "sin", sin);
    cos_stride_ = cos.stride(0);
    sin_stride_ = sin.stride(0);
    table_dtype_ = cos.dtype();
    dtype_ = query.dtype();
  }

  explicit ApplyRotaryPosEmb(const Args& args)
      : ApplyRotaryPosEmb(args.query, args.key, args.cos, args.sin,
                          args.is_neox_style, args.query_out, args.key_out) {}

  virtual void operator()(const Handle& handle, const Args& args) const = 0;

 protected:
  RotaryGeometry geometry_;
  int64_t cos_stride_ = 0;
  int64_t sin_stride_ = 0;
  DataType table_dtype_ = DataType::kFloat32;
  DataType dtype_ = DataType::kFloat32;
};

}  // namespace polyops

#endif  // POLYOPS_BASE_APPLY_ROTARY_POS_EMB_H_
