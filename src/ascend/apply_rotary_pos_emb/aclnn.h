#ifndef POLYOPS_ASCEND_APPLY_ROTARY_POS_EMB_ACLNN_H_
#define POLYOPS_ASCEND_APPLY_ROTARY_POS_EMB_ACLNN_H_

#include <cstdint>
#include <initializer_list>
#include <optional>

#include "ascend/runtime/aclnn_prepare.h"
#include "ascend/runtime/launch.h"
#include "base/apply_rotary_pos_emb.h"
#include "core/operator.h"

namespace polyops {

// Slot 0: aclnnApplyRotaryPosEmbV2(queryRef, keyRef, cos, sin, layout = 4
// (TND), rotaryMode "half" (neox) or "interleave" (GPT-J)), in place on
// [T, H, 128] query and key. The API wants cos/sin per head dim, [T, 1, D]
// (IO's TND call; the double's reading), while polyops passes [T, D/2]
// halves; so every call first expands them into scratch with two
// aclnnInplaceCopy launches over broadcast views (no host work, and a
// float32 table is cast to query's dtype on the way):
//   half:       row t = [c_0 .. c_{D/2-1}, c_0 .. c_{D/2-1}],
//   interleave: row t = [c_0, c_0, c_1, c_1, ...].
// query_out/key_out given: aclnnInplaceCopy of the input into it first,
// then the rotation in place there. key None: keyRef is a scratch
// [T, 1, 128], rotated and discarded.
// NotImplementedError: a head size other than 128 (the only one of the
// doc's Atlas A2 table, which the double enforces), partial rotary (the
// API rotates whole heads), query/key/outputs not contiguous [T, H, D]
// (the API reads TND). Up to 5 launches per call, one RunSteps unit.
template <>
class Operator<ApplyRotaryPosEmb, Device::Type::kAscend, 0>
    : public ApplyRotaryPosEmb {
 public:
  static constexpr const char* kImplementationName = "aclnn";

  explicit Operator(const Args& args) : ApplyRotaryPosEmb(args) {
    const RotaryGeometry& g = geometry_;
    POLYOPS_CHECK_T(g.head_size == kHeadDim && g.rotary_dim == kHeadDim,
                    NotImplemented,
                    "polyops.apply_rotary_pos_emb on npu is not supported for "
                    "head size ",
                    g.head_size, " (rotary_dim ", g.rotary_dim, ") with ",
                    DataTypeName(dtype_),
                    " because aclnnApplyRotaryPosEmbV2 rotates whole heads of "
                    "128 only on Atlas A2");
    bool packed = Packed(g.query) && Packed(g.query_out);
    if (g.has_key) packed = packed && Packed(g.key) && Packed(g.key_out);
    POLYOPS_CHECK_T(packed, NotImplemented,
                    "polyops.apply_rotary_pos_emb on npu is not supported for ",
                    DataTypeName(dtype_),
                    " query/key that are not contiguous [T, H, D] because "
                    "aclnnApplyRotaryPosEmbV2 reads the TND layout");
    table_bytes_ =
        ascend::ScratchAlign(g.tokens * kHeadDim * DataTypeSize(dtype_));
    scratch_bytes_ = (g.has_key ? 2 : 3) * table_bytes_;
  }

  void operator()(const Handle& handle, const Args& args) const override {
    const RotaryGeometry& g = geometry_;
    if (g.tokens == 0) return;
    using ascend::Operand;
    static const auto copy = ascend::Phase2("aclnnInplaceCopy", "8.0.RC1");
    static const auto rope =
        ascend::Phase2("aclnnApplyRotaryPosEmbV2", "8.2.RC1.alpha002");
    const Tensor q =
        Heads(args.query_out ? *args.query_out : args.query, g.query.heads);
    const Operand k =
        args.key ? Operand::Ref(Heads(args.key_out ? *args.key_out : *args.key,
                                      g.key.heads))
                 : Operand::ScratchRef(Table(args.query), 2 * table_bytes_);
    // The key copy's source (query when it does not run).
    const Tensor key_in = args.key ? Heads(*args.key, g.key.heads) : q;
    const Expansion c = Expand(args.cos, 0);
    const Expansion s = Expand(args.sin, table_bytes_);
    // One unit: the cos/sin tables in scratch must not be overwritten by
    // another call on the stream before the rotation reads them.
    const ascend::Step query_step{
        &query_copy_,
        "aclnnInplaceCopy",
        {Operand::Ref(q), Operand::In(Heads(args.query, g.query.heads))},
        &ascend::PrepareInplaceCopy,
        nullptr,
        copy};
    const ascend::Step key_step{&key_copy_,
                                "aclnnInplaceCopy",
                                {k, Operand::In(key_in)},
                                &ascend::PrepareInplaceCopy,
                                nullptr,
                                copy};
    const ascend::Step cos_step{&cos_copy_,        "aclnnInplaceCopy",
                                {c.table, c.half}, &ascend::PrepareInplaceCopy,
                                nullptr,           copy};
    const ascend::Step sin_step{&sin_copy_,        "aclnnInplaceCopy",
                                {s.table, s.half}, &ascend::PrepareInplaceCopy,
                                nullptr,           copy};
    const ascend::Step rope_step{
        &executor_,
        "aclnnApplyRotaryPosEmbV2",
        {Operand::Ref(q), k, Operand::ScratchIn(Table(args.query), 0),
         Operand::ScratchIn(Table(args.query), table_bytes_)},
        &Prepare,
        const_cast<Operator*>(this),
        rope};
    ascend::Step steps[5];
    size_t count = 0;
    if (args.query_out) steps[count++] = query_step;
    if (args.key && args.key_out) steps[count++] = key_step;
    steps[count++] = cos_step;
    steps[count++] = sin_step;
    steps[count++] = rope_step;
    ascend::RunSteps(kName, handle, scratch_bytes_, steps, count);
  }

 private:
  static constexpr int64_t kHeadDim = 128;

  bool Packed(const RotaryHeads& heads) const {
    return heads.head_stride == kHeadDim &&
           (geometry_.tokens <= 1 ||
            heads.token_stride == heads.heads * kHeadDim);
  }

  Tensor View(void* data, DataType dtype, std::initializer_list<int64_t> shape,
              std::initializer_list<int64_t> strides,
              const Tensor& like) const {
    return Tensor::FromParts(data, static_cast<int>(shape.size()),
                             shape.begin(), strides.begin(), dtype,
                             like.device());
  }

  // [T, H, 128], contiguous.
  Tensor Heads(const Tensor& t, int64_t heads) const {
    return View(t.data(), dtype_, {geometry_.tokens, heads, kHeadDim},
                {heads * kHeadDim, kHeadDim, 1}, t);
  }

  // A [T, 1, 128] table in scratch.
  Tensor Table(const Tensor& like) const {
    return View(nullptr, dtype_, {geometry_.tokens, 1, kHeadDim},
                {kHeadDim, kHeadDim, 1}, like);
  }

  // The copy that fills a [T, 1, 128] table (scratch at `offset`) from
  // `half`, [T, 64] (row stride free), repeated as the rotary mode pairs
  // the dims.
  struct Expansion {
    ascend::Operand table;
    ascend::Operand half;
  };
  Expansion Expand(const Tensor& half, int64_t offset) const {
    const int64_t t = geometry_.tokens;
    const int64_t h = kHeadDim / 2;
    const int64_t row = half.stride(0);
    const bool neox = geometry_.neox;
    // half: [T, 1, 2, 64] <- [T, 1, 1, 64]; interleave: [T, 1, 64, 2] <-
    // [T, 1, 64, 1].
    const Tensor dst = neox ? View(nullptr, dtype_, {t, 1, 2, h},
                                   {kHeadDim, kHeadDim, h, 1}, half)
                            : View(nullptr, dtype_, {t, 1, h, 2},
                                   {kHeadDim, kHeadDim, 2, 1}, half);
    const Tensor src = neox ? View(half.data(), half.dtype(), {t, 1, 1, h},
                                   {row, 0, 0, 1}, half)
                            : View(half.data(), half.dtype(), {t, 1, h, 1},
                                   {row, 0, 1, 0}, half);
    return {ascend::Operand::ScratchRef(dst, offset), ascend::Operand::In(src)};
  }

  static ascend::AclnnStatus Prepare(void* self, ascend::AclTensor* const* t,
                                     uint64_t* workspace,
                                     ascend::AclOpExecutor** executor) {
    using Fn = ascend::AclnnStatus (*)(ascend::AclTensor*, ascend::AclTensor*,
                                       const ascend::AclTensor*,
                                       const ascend::AclTensor*, int64_t, char*,
                                       uint64_t*, ascend::AclOpExecutor**);
    static const auto get = ascend::Phase1<Fn>(
        "aclnnApplyRotaryPosEmbV2GetWorkspaceSize", "8.2.RC1.alpha002");
    char half[] = "half";
    char interleave[] = "interleave";
    const bool neox = static_cast<Operator*>(self)->geometry_.neox;
    return get(t[0], t[1], t[2], t[3], /*layout TND=*/4,
               neox ? half : interleave, workspace, executor);
  }

  int64_t table_bytes_ = 0;
  int64_t scratch_bytes_ = 0;
  mutable ascend::ExecutorCache query_copy_;
  mutable ascend::ExecutorCache key_copy_;
  mutable ascend::ExecutorCache cos_copy_;
  mutable ascend::ExecutorCache sin_copy_;
  mutable ascend::ExecutorCache executor_;
};

}  // namespace polyops

#endif  // POLYOPS_ASCEND_APPLY_ROTARY_POS_EMB_ACLNN_H_
