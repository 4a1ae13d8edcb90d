#ifndef POLYOPS_ASCEND_PAGED_ATTENTION_IFA_V4_H_
#define POLYOPS_ASCEND_PAGED_ATTENTION_IFA_V4_H_

#include <optional>
#include <vector>

#include "ascend/kernels/attention/attention.h"
#include "base/paged_attention.h"
#include "core/operator.h"

namespace polyops {

// Slot 1: aclnnIncreFlashAttentionV4, the decode-only API, in "BSND" layout:
// query and out viewed [B, 1, Hq, D] (no copy), the paged caches as
// PagedCacheView gives them, blocktable int32 on the device (an int64
// block_table is clamped and cast to an int32 copy first,
// ascend::RunPagedApi), actualSeqLengths = seq_lens (per request). No mask, no
// quantization. float16 and bfloat16 only (NotImplementedError for float32).
// Host lengths, the fallback copy and the non-repeatable executor as in slot 0.
// Slot 0 (FIA V3) stays the default: it is what torch_npu and vllm-ascend
// call on A2/A3; this one is the second route. Unverified: the first CANN
// version with IncreFlashAttentionV4 (docs/backends/ascend.md, "First
// versions"; the docs show it by 8.1.RC1), FIA's zero-length rule for a request
// with seq_lens 0, and the row-invalid meaning of innerPrecise 2 (as in slot
// 0).
template <>
class Operator<PagedAttention, Device::Type::kAscend, 1>
    : public PagedAttention {
 public:
  static constexpr const char* kImplementationName = "ifa_v4";

  explicit Operator(const Args& args) : PagedAttention(args) {
    ascend::CheckFiaDtype(kName, kApi, dtype_);
  }

  void operator()(const Handle& handle, const Args& args) const override {
    const std::vector<int64_t> lengths = ascend::CheckedSeqLens(
        handle, args.seq_lens, args.seq_lens_host, max_blocks_, block_size_);
    if (args.out->numel() == 0) return;
    static const auto launch = ascend::Phase2(kApi, kSince);
    ascend::OneShotCall arrays(kName);  // owns the lengths until the launch
    Phase1Context context{this, arrays.IntArray(lengths)};
    const ascend::AttentionOperands operands{
        OneTokenView(args.query),
        ascend::PagedCacheView(args.key_cache),
        ascend::PagedCacheView(args.value_cache),
        std::nullopt,
        &args.block_table,
        OneTokenView(*args.out)};
    ascend::RunPagedApi(kName, kApi, handle, operands, &Phase1, &context,
                        launch);
  }

 private:
  static constexpr const char* kApi = "aclnnIncreFlashAttentionV4";
  static constexpr const char* kSince = "8.1.RC1 (unverified)";

  struct Phase1Context {
    const Operator* self;
    ascend::AclIntArray* lengths;
  };
  static ascend::AclnnStatus Phase1(void* context, ascend::AclTensor* query,
                                    ascend::AclTensorList* key,
                                    ascend::AclTensorList* value,
                                    ascend::AclTensor*,
                                    ascend::AclTensor* table,
                                    ascend::AclTensor* out, uint64_t* workspace,
                                    ascend::AclOpExecutor** executor) {
    using Fn = ascend::AclnnStatus (*)(
        const ascend::AclTensor* query, const ascend::AclTensorList* key,
        const ascend::AclTensorList* value, const ascend::AclTensor* pse_shift,
        const ascend::AclTensor* atten_mask,
        const ascend::AclIntArray* actual_seq_lengths,
        const ascend::AclTensor* dequant_scale1,
        const ascend::AclTensor* quant_scale1,
        const ascend::AclTensor* dequant_scale2,
        const ascend::AclTensor* quant_scale2,
        const ascend::AclTensor* quant_offset2,
        const ascend::AclTensor* antiquant_scale,
        const ascend::AclTensor* antiquant_offset,
        const ascend::AclTensor* block_table,
        const ascend::AclTensor* kv_padding_size, int64_t num_heads,
        double scale_value, char* input_layout, int64_t num_key_value_heads,
        int64_t block_size, int64_t inner_precise,
        const ascend::AclTensor* attention_out, uint64_t* workspace_size,
        ascend::AclOpExecutor** executor);
    static const auto get = ascend::Phase1<Fn>(
        "aclnnIncreFlashAttentionV4GetWorkspaceSize", kSince);
    const auto* c = static_cast<Phase1Context*>(context);
    const Operator& op = *c->self;
    char layout[] = "BSND";
    return get(query, key, value, nullptr, nullptr, c->lengths, nullptr,
               nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, table,
               nullptr, op.num_heads_, op.scale_, layout, op.num_kv_heads_,
               op.block_size_, ascend::kFiaInnerPrecise, out, workspace,
               executor);
  }

  // [B, H, D] as BSND [B, 1, H, D]: the inserted dim has size 1, so its
  // stride is free.
  static Tensor OneTokenView(const Tensor& t) {
    const int64_t shape[4] = {t.size(0), 1, t.size(1), t.size(2)};
    const int64_t strides[4] = {t.stride(0), t.stride(0), t.stride(1), 1};
    return Tensor::FromParts(t.data(), 4, shape, strides, t.dtype(),
                             t.device());
  }
};

}  // namespace polyops

#endif  // POLYOPS_ASCEND_PAGED_ATTENTION_IFA_V4_H_
