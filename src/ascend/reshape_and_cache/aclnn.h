#ifndef POLYOPS_ASCEND_RESHAPE_AND_CACHE_ACLNN_H_
#define POLYOPS_ASCEND_RESHAPE_AND_CACHE_ACLNN_H_

#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <string>

#include "ascend/runtime/aclnn_prepare.h"
#include "ascend/runtime/launch.h"
#include "base/reshape_and_cache.h"
#include "core/operator.h"

namespace polyops {

namespace ascend {

// Whether the loaded CANN has the aclnnScatterPaKvCache prototype polyops
// calls (…, cacheMode, scatterMode, strides, offsets): 8.3.RC1 (commercial)
// and later. 8.3.RC1.alpha003 exports the same symbol without the last
// three parameters (docs/backends/ascend.md, "Prototype drift"), and dlsym
// cannot tell them apart, so alpha/beta builds of 8.3.RC1, older and unknown
// versions are refused. Betas of 8.3.RC1 were not documented either way.
inline bool HasScatterPaKvCacheV83(const std::string& version) {
  int major = 0, minor = 0;
  if (std::sscanf(version.c_str(), "%d.%d", &major, &minor) != 2) return false;
  if (major != 8) return major > 8;
  if (minor != 3) return minor > 3;
  return version.find("alpha") == std::string::npos &&
         version.find("beta") == std::string::npos;
}

}  // namespace ascend

// Slot 0: aclnnScatterPaKvCache(key, keyCacheRef, slotMapping, value,
// valueCacheRef, NULL, NULL, NULL, cacheMode "Norm", scatterMode "None",
// strides {1, 1}, offsets {0, 0}) as vllm-ascend passes them; slot -1 is
// skipped (vllm-ascend's tests, A3), int32 and int64 slot mappings alike.
// It moves rows of bytes, and Atlas A2/A3 take FLOAT16, BF16 and INT8
// only, so float32 rows travel as INT8 rows four times as wide (a choice:
// never run on a real toolkit). The API needs contiguous tensors: strided
// key/value (slices of a fused qkv) are first copied into scratch with
// aclnnInplaceCopy; strided caches (vLLM's K/V views of one allocation,
// NHD or HND) and a strided slot_mapping are NotImplementedError, since
// copying a whole cache per call is no route. CANN before 8.3.RC1
// (commercial), where the prototype differs, is a RuntimeError naming the
// version.
template <>
class Operator<ReshapeAndCache, Device::Type::kAscend, 0>
    : public ReshapeAndCache {
 public:
  static constexpr const char* kImplementationName = "aclnn";

  explicit Operator(const Args& args)
      : ReshapeAndCache(args), strides_({1, 1}), offsets_({0, 0}) {
    const std::string& version = ascend::GetRuntime().version;
    if (!ascend::HasScatterPaKvCacheV83(version)) {
      throw BackendError(detail::Concat(
          "polyops.reshape_and_cache on npu needs CANN 8.3.RC1 (commercial) "
          "or later, whose aclnnScatterPaKvCache takes scatterMode, strides "
          "and offsets; the loaded CANN is ",
          version.empty() ? "of unknown version" : version,
          " (8.3.RC1.alpha003 has a shorter prototype under the same name)"));
    }
    POLYOPS_CHECK_T(
        args.key_cache.IsContiguous() && args.value_cache.IsContiguous(),
        NotImplemented,
        "polyops.reshape_and_cache on npu is not supported for ",
        DataTypeName(args.key.dtype()), " caches with strides ",
        args.key_cache.StridesString(), " / ", args.value_cache.StridesString(),
        " (views into one K/V allocation, NHD or HND) because "
        "aclnnScatterPaKvCache takes contiguous [num_blocks, block_size, "
        "Hkv, D] caches");
    POLYOPS_CHECK_T(tokens_ <= 1 || slot_stride_ == 1, NotImplemented,
                    "polyops.reshape_and_cache on npu is not supported for a "
                    "strided slot_mapping (stride ",
                    slot_stride_, ", ", DataTypeName(args.key.dtype()),
                    " key) because aclnnScatterPaKvCache takes it contiguous");
    copy_key_ = !args.key.IsContiguous();
    copy_value_ = !args.value.IsContiguous();
    const int64_t bytes = args.key.numel() * element_size_;
    if (copy_key_) scratch_bytes_ = ascend::ScratchAlign(bytes);
    value_offset_ = scratch_bytes_;
    if (copy_value_) scratch_bytes_ += ascend::ScratchAlign(bytes);
  }

  void operator()(const Handle& handle, const Args& args) const override {
    if (tokens_ == 0) return;
    using ascend::Operand;
    static const auto copy = ascend::Phase2("aclnnInplaceCopy", "8.0.RC1");
    static const auto scatter =
        ascend::Phase2("aclnnScatterPaKvCache", "8.3.RC1");
    const Operand k = copy_key_ ? Operand::ScratchIn(Rows(Packed(args.key)), 0)
                                : Operand::In(Rows(args.key));
    const Operand v = copy_value_ ? Operand::ScratchIn(Rows(Packed(args.value)),
                                                       value_offset_)
                                  : Operand::In(Rows(args.value));
    // One unit: the packed copies in scratch must not be overwritten by
    // another call on the stream before the scatter reads them.
    const ascend::Step key_step{
        &key_copy_,
        "aclnnInplaceCopy",
        {Operand::ScratchRef(Packed(args.key), 0), Operand::In(args.key)},
        &ascend::PrepareInplaceCopy,
        nullptr,
        copy};
    const ascend::Step value_step{
        &value_copy_,
        "aclnnInplaceCopy",
        {Operand::ScratchRef(Packed(args.value), value_offset_),
         Operand::In(args.value)},
        &ascend::PrepareInplaceCopy,
        nullptr,
        copy};
    const ascend::Step scatter_step{
        &executor_,
        "aclnnScatterPaKvCache",
        {k, Operand::Ref(Rows(args.key_cache)), Operand::In(args.slot_mapping),
         v, Operand::Ref(Rows(args.value_cache))},
        &Prepare,
        const_cast<Operator*>(this),
        scatter};
    ascend::Step steps[3];
    size_t count = 0;
    if (copy_key_) steps[count++] = key_step;
    if (copy_value_) steps[count++] = value_step;
    steps[count++] = scatter_step;
    ascend::RunSteps(kName, handle, scratch_bytes_, steps, count);
  }

 private:
  // A contiguous tensor of `t`'s shape (the scratch copy of key or value).
  static Tensor Packed(const Tensor& t) {
    return Tensor::FromParts(
        nullptr, 3, t.shape(),
        std::initializer_list<int64_t>{t.size(1) * t.size(2), t.size(2), 1}
            .begin(),
        t.dtype(), t.device());
  }

  // `t` as the API sees it: float32 rows as INT8 rows of 4x the bytes.
  // (Contiguous, so only the last dim's stride is not a multiple.)
  static Tensor Rows(const Tensor& t) {
    if (t.dtype() != DataType::kFloat32) return t;
    int64_t shape[kMaxDims];
    int64_t strides[kMaxDims];
    for (int d = 0; d < t.ndim(); ++d) {
      shape[d] = t.size(d);
      strides[d] = t.stride(d) * 4;
    }
    shape[t.ndim() - 1] *= 4;
    strides[t.ndim() - 1] = 1;
    return Tensor::FromParts(t.data(), t.ndim(), shape, strides,
                             DataType::kInt8, t.device());
  }

  static ascend::AclnnStatus Prepare(void* self, ascend::AclTensor* const* t,
                                     uint64_t* workspace,
                                     ascend::AclOpExecutor** executor) {
    using Fn = ascend::AclnnStatus (*)(
        const ascend::AclTensor*, ascend::AclTensor*, const ascend::AclTensor*,
        const ascend::AclTensor*, ascend::AclTensor*, const ascend::AclTensor*,
        const ascend::AclTensor*, const ascend::AclTensor*, char*, char*,
        const ascend::AclIntArray*, const ascend::AclIntArray*, uint64_t*,
        ascend::AclOpExecutor**);
    static const auto get =
        ascend::Phase1<Fn>("aclnnScatterPaKvCacheGetWorkspaceSize", "8.3.RC1");
    const auto* op = static_cast<const Operator*>(self);
    char cache_mode[] = "Norm";
    char scatter_mode[] = "None";
    return get(t[0], t[1], t[2], t[3], t[4], nullptr, nullptr, nullptr,
               cache_mode, scatter_mode, op->strides_.get(), op->offsets_.get(),
               workspace, executor);
  }

  // Host arrays of the call, built once.
  ascend::IntArrayHandle strides_;
  ascend::IntArrayHandle offsets_;
  bool copy_key_ = false;
  bool copy_value_ = false;
  int64_t scratch_bytes_ = 0;
  int64_t value_offset_ = 0;
  mutable ascend::ExecutorCache key_copy_;
  mutable ascend::ExecutorCache value_copy_;
  mutable ascend::ExecutorCache executor_;
};

}  // namespace polyops

#endif  // POLYOPS_ASCEND_RESHAPE_AND_CACHE_ACLNN_H_
