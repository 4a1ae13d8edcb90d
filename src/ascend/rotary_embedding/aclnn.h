#ifndef POLYOPS_ASCEND_ROTARY_EMBEDDING_ACLNN_H_
#define POLYOPS_ASCEND_ROTARY_EMBEDDING_ACLNN_H_

#include <cstdint>
#include <initializer_list>
#include <optional>

#include "ascend/runtime/aclnn_prepare.h"
#include "ascend/runtime/launch.h"
#include "base/rotary_embedding.h"
#include "core/operator.h"

namespace polyops {

// Slot 0: aclnnRopeWithSinCosCache(positions, queryIn, keyIn, cosSinCache,
// mropeSection = NULL, headSize, isNeoxStyle, queryOut, keyOut): vLLM's
// semantics, partial rotary included (dims past rotary_dim pass through).
//   q and k go in as 2-D [T, H * head_size] views (3-D descriptors gave
//   wrong results on the chip: docs/backends/ascend.md, "RoPE descriptors"), so
//   a 3-D tensor needs its heads packed (head stride = head_size); the token
//   stride is free. In place unless query_out/key_out are given
//   (queryOut/keyOut are then those tensors): queryIn and queryOut may be the
//   same memory. key None: keyIn is query's first head (read only) and keyOut a
//   scratch [T, head_size], discarded. int32 positions: aclnnCast to int64 into
//   scratch first (the API takes INT64 only), a second launch in the same
//   RunSteps unit.
// NotImplementedError: head_size or rotary_dim not a multiple of 32
// (float16/bfloat16) or 16 (float32), a float32 cos_sin_cache with a
// float16/bfloat16 query (the API takes the cache in query's dtype, as the
// double reads the doc), heads not packed.
// Repeatable executor: the aclSetInputTensorAddr indexes are the tensor
// parameters in signature order (the double's mapping). IO kept this op
// non-repeatable for fear of hidden attributes; never run on a real
// toolkit (docs/backends/ascend.md, trap "Executor lifetime").
template <>
class Operator<RotaryEmbedding, Device::Type::kAscend, 0>
    : public RotaryEmbedding {
 public:
  static constexpr const char* kImplementationName = "aclnn";

  explicit Operator(const Args& args) : RotaryEmbedding(args) {
    const RotaryGeometry& g = geometry_;
    const int64_t multiple = dtype_ == DataType::kFloat32 ? 16 : 32;
    POLYOPS_CHECK_T(g.head_size % multiple == 0 && g.rotary_dim % multiple == 0,
                    NotImplemented,
                    "polyops.rotary_embedding on npu is not supported for "
                    "head_size ",
                    g.head_size, " and rotary_dim ", g.rotary_dim, " with ",
                    DataTypeName(dtype_),
                    " because aclnnRopeWithSinCosCache needs both to be "
                    "multiples of ",
                    multiple);
    POLYOPS_CHECK_T(table_dtype_ == dtype_, NotImplemented,
                    "polyops.rotary_embedding on npu is not supported for a ",
                    DataTypeName(table_dtype_), " cos_sin_cache with ",
                    DataTypeName(dtype_),
                    " query because aclnnRopeWithSinCosCache takes the cache "
                    "in query's dtype");
    bool packed = g.query.head_stride == g.head_size &&
                  g.query_out.head_stride == g.head_size;
    if (g.has_key) {
      packed = packed && g.key.head_stride == g.head_size &&
               g.key_out.head_stride == g.head_size;
    }
    POLYOPS_CHECK_T(packed, NotImplemented,
                    "polyops.rotary_embedding on npu is not supported for ",
                    DataTypeName(dtype_),
                    " query/key whose heads are not packed (head stride != "
                    "head_size) because aclnnRopeWithSinCosCache takes them "
                    "as 2-D [T, H * head_size]");
    if (position_dtype_ == DataType::kInt32) {
      scratch_bytes_ = ascend::ScratchAlign(g.tokens * 8);
    }
    key_offset_ = scratch_bytes_;
    if (!g.has_key) {
      scratch_bytes_ +=
          ascend::ScratchAlign(g.tokens * g.head_size * DataTypeSize(dtype_));
    }
  }

  void operator()(const Handle& handle, const Args& args) const override {
    const RotaryGeometry& g = geometry_;
    if (g.tokens == 0) return;
    using ascend::Operand;
    static const auto cast = ascend::Phase2("aclnnCast", "8.0.RC1");
    static const auto rope =
        ascend::Phase2("aclnnRopeWithSinCosCache", "8.1.RC1.beta1");
    const bool widen = position_dtype_ == DataType::kInt32;
    const Tensor wide =
        View(args.positions, DataType::kInt64, nullptr, {g.tokens}, {1});
    const Tensor& q_out = args.query_out ? *args.query_out : args.query;
    const Tensor first_head =
        View(args.query, dtype_, args.query.data(), {g.tokens, g.head_size},
             {g.query.token_stride, 1});
    const Operand key_in = args.key ? Operand::In(Flat(*args.key, g.key))
                                    : Operand::In(first_head);
    const Operand key_result =
        args.key
            ? Operand::Out(
                  Flat(args.key_out ? *args.key_out : *args.key, g.key_out))
            : Operand::Scratch(View(args.query, dtype_, nullptr,
                                    {g.tokens, g.head_size}, {g.head_size, 1}),
                               key_offset_);
    // One unit: the int64 positions in scratch must not be overwritten by
    // another call on the stream between the cast and the rotation.
    const ascend::Step cast_step{
        &cast_,
        "aclnnCast",
        {Operand::In(args.positions), Operand::Scratch(wide, 0)},
        &ascend::PrepareCast,
        const_cast<ascend::AclDataType*>(&kWidePositions),
        cast};
    const ascend::Step rope_step{
        &executor_,
        "aclnnRopeWithSinCosCache",
        {widen ? Operand::ScratchIn(wide, 0) : Operand::In(args.positions),
         Operand::In(Flat(args.query, g.query)), key_in,
         Operand::In(args.cos_sin_cache),
         Operand::Out(Flat(q_out, g.query_out)), key_result},
        &Prepare,
        const_cast<Operator*>(this),
        rope};
    ascend::Step steps[2];
    size_t count = 0;
    if (widen) steps[count++] = cast_step;
    steps[count++] = rope_step;
    ascend::RunSteps(kName, handle, scratch_bytes_, steps, count);
  }

 private:
  static Tensor View(const Tensor& like, DataType dtype, void* data,
                     std::initializer_list<int64_t> shape,
                     std::initializer_list<int64_t> strides) {
    return Tensor::FromParts(data, static_cast<int>(shape.size()),
                             shape.begin(), strides.begin(), dtype,
                             like.device());
  }

  // [T, H * head_size] of a tensor whose heads are packed.
  Tensor Flat(const Tensor& t, const RotaryHeads& heads) const {
    return View(t, dtype_, t.data(),
                {geometry_.tokens, heads.heads * geometry_.head_size},
                {heads.token_stride, 1});
  }

  static ascend::AclnnStatus Prepare(void* self, ascend::AclTensor* const* t,
                                     uint64_t* workspace,
                                     ascend::AclOpExecutor** executor) {
    using Fn = ascend::AclnnStatus (*)(
        const ascend::AclTensor*, const ascend::AclTensor*,
        const ascend::AclTensor*, const ascend::AclTensor*,
        const ascend::AclIntArray*, int64_t, bool, ascend::AclTensor*,
        ascend::AclTensor*, uint64_t*, ascend::AclOpExecutor**);
    static const auto get = ascend::Phase1<Fn>(
        "aclnnRopeWithSinCosCacheGetWorkspaceSize", "8.1.RC1.beta1");
    const RotaryGeometry& g = static_cast<Operator*>(self)->geometry_;
    return get(t[0], t[1], t[2], t[3], nullptr, g.head_size, g.neox, t[4], t[5],
               workspace, executor);
  }

  // The API takes INT64 positions only.
  static constexpr ascend::AclDataType kWidePositions =
      ascend::AclDataType::kInt64;

  int64_t scratch_bytes_ = 0;
  int64_t key_offset_ = 0;
  mutable ascend::ExecutorCache cast_;
  mutable ascend::ExecutorCache executor_;
};

}  // namespace polyops

#endif  // POLYOPS_ASCEND_ROTARY_EMBEDDING_ACLNN_H_
