#ifndef POLYOPS_ASCEND_PAGED_ATTENTION_FIA_V3_H_
#define POLYOPS_ASCEND_PAGED_ATTENTION_FIA_V3_H_

#include <optional>
#include <vector>

#include "ascend/kernels/attention/attention.h"
#include "base/paged_attention.h"
#include "core/operator.h"

namespace polyops {

// Slot 0: aclnnFusedInferAttentionScoreV3 with one query token per request,
// vllm-ascend's aclnn decode path: "TND" with actualSeqLengths = 1, 2, ..,
// B (geometry, no data), the paged caches as PagedCacheView gives them,
// blockTable int32 on the device (an int64 block_table is clamped and cast
// to an int32 copy first, ascend::RunPagedApi), actualSeqLengthsKv =
// seq_lens, no mask (sparseMode 0). float16 and bfloat16 only
// (NotImplementedError for float32: the API has no float32 query).
//   seq_lens: a host array, from seq_lens_host when given, else copied from
//     the device after a stream synchronization (a stall, impossible under
//     graph capture: pass seq_lens_host). block_table_host is not needed:
//     FIA reads the block table on the device, so a bad block id is a fault
//     at the next synchronization, not a ValueError.
//   executor: phase 1 every call (the lengths are baked into it, and they
//     change every decode step anyway), not repeatable (OneShotCall) except
//     with an int64 block table.
//   Unverified: FIA's handling of a request with seq_lens 0 on the NPU
//     (polyops wants zeros; the double gives zeros), and the limits of
//     trap 18 (TND head size and dtype on A2).
template <>
class Operator<PagedAttention, Device::Type::kAscend, 0>
    : public PagedAttention {
 public:
  static constexpr const char* kImplementationName = "fia_v3";

  explicit Operator(const Args& args) : PagedAttention(args) {
    ascend::CheckFiaDtype(kName, ascend::kFiaApi, dtype_);
    for (int64_t b = 1; b <= batch_; ++b) query_ends_.push_back(b);
  }

  void operator()(const Handle& handle, const Args& args) const override {
    ascend::FiaCall call;
    call.kv_lengths = ascend::CheckedSeqLens(
        handle, args.seq_lens, args.seq_lens_host, max_blocks_, block_size_);
    if (args.out->numel() == 0) return;
    call.query = args.query;
    call.key = ascend::PagedCacheView(args.key_cache);
    call.value = ascend::PagedCacheView(args.value_cache);
    call.block_table = &args.block_table;
    call.out = *args.out;
    call.q_ends = query_ends_;
    call.num_heads = num_heads_;
    call.num_kv_heads = num_kv_heads_;
    call.scale = scale_;
    call.block_size = block_size_;
    ascend::RunFusedInferAttention(kName, handle, call);
  }

 private:
  std::vector<int64_t> query_ends_;  // 1, 2, .., B: one token per request
};

}  // namespace polyops

#endif  // POLYOPS_ASCEND_PAGED_ATTENTION_FIA_V3_H_
