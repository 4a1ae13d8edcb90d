#ifndef POLYOPS_ASCEND_FLASH_ATTENTION_FIA_V3_H_
#define POLYOPS_ASCEND_FLASH_ATTENTION_FIA_V3_H_

#include <optional>
#include <vector>

#include "ascend/kernels/attention/attention.h"
#include "base/flash_attention.h"
#include "core/operator.h"

namespace polyops {

// Slot 0: aclnnFusedInferAttentionScoreV3 in "TND" layout, float16 and
// bfloat16 (the API has no float32 query: NotImplementedError).
//   lengths: actualSeqLengths = cu_seqlens_q[1:] (cumulative, last == T);
//     actualSeqLengthsKv = cu_seqlens_kv[1:] unpaged, or the per-request kv
//     lengths when paged. They are host arrays: from cu_seqlens_*_host when
//     given, else copied from the device after a stream synchronization (a
//     stall, and impossible under graph capture: pass the host copies).
//   masks: causal -> sparseMode 3 (bottom-right aligned, polyops' causal);
//     a window -> sparseMode 4 (band) with preTokens = window_left and
//     nextTokens = window_right (0 when causal), -1 -> unbounded; neither
//     -> sparseMode 0. Modes 3 and 4 take the 2048x2048 triu mask, made once
//     per process and device. Unverified (docs/backends/ascend.md,
//     "Sliding-window band"): that the band spans [diag - preTokens, diag +
//     nextTokens], i.e. that preTokens counts the earlier keys besides the
//     diagonal (sliding_window W -> preTokens W - 1; vllm-ascend passes W); the
//     double implements this reading. Also unverified: sparseMode 4 with TND
//     (the A2 table lists 0 and 3, trap 18; vllm-ascend uses 4), the TND
//     head-size/dtype limits of trap 18, requests with no query tokens, strided
//     (non-contiguous) query/key/value views.
//   paged: the caches as PagedCacheView gives them, blockTable int32 on the
//     device (an int64 block_table is clamped and cast to an int32 copy
//     first, ascend::RunPagedApi), blockSize = the cache's block size.
//   executor: phase 1 every call (the lengths are baked into it), not
//     repeatable (OneShotCall) except with an int64 block table. Block ids are
//     read on the device only: a bad id is a fault at the next synchronization,
//     not a ValueError.
template <>
class Operator<FlashAttention, Device::Type::kAscend, 0>
    : public FlashAttention {
 public:
  static constexpr const char* kImplementationName = "fia_v3";

  explicit Operator(const Args& args) : FlashAttention(args) {
    ascend::CheckFiaDtype(kName, ascend::kFiaApi, dtype_);
    // Causal hides every key right of the diagonal: a right window of 0.
    const int64_t left = window_left_;
    const int64_t right = causal_ ? 0 : window_right_;
    if (left < 0 && right < 0) {
      sparse_mode_ = ascend::FiaSparseMode::kNone;
    } else if (left < 0 && right == 0) {
      sparse_mode_ = ascend::FiaSparseMode::kRightDownCausal;
    } else {
      sparse_mode_ = ascend::FiaSparseMode::kBand;
      pre_tokens_ = left < 0 ? ascend::kFiaUnbounded : left;
      next_tokens_ = right < 0 ? ascend::kFiaUnbounded : right;
    }
  }

  void operator()(const Handle& handle, const Args& args) const override {
    const std::vector<int64_t> cu_q = ascend::HostInts(
        handle, args.cu_seqlens_q, args.cu_seqlens_q_host, kName);
    const std::vector<int64_t> cu_kv = ascend::HostInts(
        handle, args.cu_seqlens_kv, args.cu_seqlens_kv_host, kName);
    CheckCuSeqlens(cu_q.data(), cu_kv.data(), batch_, num_tokens_q_,
                   num_tokens_kv_);
    ascend::FiaCall call;
    for (int64_t b = 0; b < batch_; ++b) {
      call.q_ends.push_back(cu_q[b + 1]);
      const int64_t kv_len = cu_kv[b + 1] - cu_kv[b];
      POLYOPS_CHECK(!paged_ || kv_len <= max_blocks_ * block_size_,
                    "polyops.flash_attention: sequence ", b, " has ", kv_len,
                    " kv tokens, more than its block_table row holds (",
                    max_blocks_, " blocks of ", block_size_, ")");
      call.kv_lengths.push_back(paged_ ? kv_len : cu_kv[b + 1]);
    }
    if (args.out->numel() == 0)
      return;  // no query token (then batch_ may be 0)
    call.query = args.query;
    call.key = paged_ ? ascend::PagedCacheView(args.key) : args.key;
    call.value = paged_ ? ascend::PagedCacheView(args.value) : args.value;
    call.block_table = paged_ ? &*args.block_table : nullptr;
    call.out = *args.out;
    call.num_heads = num_heads_;
    call.num_kv_heads = num_kv_heads_;
    call.scale = scale_;
    call.sparse_mode = sparse_mode_;
    call.pre_tokens = pre_tokens_;
    call.next_tokens = next_tokens_;
    call.block_size = paged_ ? block_size_ : 0;
    ascend::RunFusedInferAttention(kName, handle, call);
  }

 private:
  ascend::FiaSparseMode sparse_mode_ = ascend::FiaSparseMode::kNone;
  int64_t pre_tokens_ = ascend::kFiaUnbounded;
  int64_t next_tokens_ = ascend::kFiaUnbounded;
};

}  // namespace polyops

#endif  // POLYOPS_ASCEND_FLASH_ATTENTION_FIA_V3_H_
