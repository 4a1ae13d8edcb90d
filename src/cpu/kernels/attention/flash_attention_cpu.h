// What both CPU flash_attention slots share.
#ifndef POLYOPS_CPU_KERNELS_ATTENTION_FLASH_ATTENTION_CPU_H_
#define POLYOPS_CPU_KERNELS_ATTENTION_FLASH_ATTENTION_CPU_H_

#include <optional>
#include <vector>

#include "base/flash_attention.h"
#include "cpu/kernels/attention/attention.h"

namespace polyops::cpu {

class FlashAttentionCpu : public FlashAttention {
 public:
  using FlashAttention::FlashAttention;

 protected:
  // This call's sequences, read (and checked) from cu_seqlens and the block
  // table: data, so read on every call, not at construction. The host
  // copies, when given, must hold the same values: on CPU both sides are
  // host memory, so that is checked here (a device backend cannot check it
  // without a device-to-host copy) and the host copy is what is read, the
  // path a device backend takes.
  SequenceTable ReadSequences(
      const Tensor& cu_seqlens_q, const Tensor& cu_seqlens_kv,
      const std::optional<Tensor>& block_table,
      const std::optional<Tensor>& cu_seqlens_q_host,
      const std::optional<Tensor>& cu_seqlens_kv_host) const {
    const std::vector<int64_t> cu_q =
        ReadOffsets(cu_seqlens_q, cu_seqlens_q_host, "cu_seqlens_q");
    const std::vector<int64_t> cu_kv =
        ReadOffsets(cu_seqlens_kv, cu_seqlens_kv_host, "cu_seqlens_kv");
    SequenceTable read;
    ReadVarlenSequences(cu_q.data(), cu_kv.data(), batch_, num_tokens_q_,
                        num_tokens_kv_, paged_ ? &*block_table : nullptr,
                        max_blocks_, block_size_, num_blocks_, &read);
    return read;
  }

 private:
  // The B+1 entries of `device` (int32 or int64), each read once; with a
  // host copy, that copy's entries, each checked against `device`'s.
  std::vector<int64_t> ReadOffsets(const Tensor& device,
                                   const std::optional<Tensor>& host,
                                   const char* name) const {
    std::vector<int64_t> values(batch_ + 1);
    for (int64_t b = 0; b <= batch_; ++b) {
      const int64_t expected = ReadIndex(device, b);
      values[b] = expected;
      if (!host) continue;
      values[b] = ReadIndex(*host, b);
      POLYOPS_CHECK(values[b] == expected, "polyops.flash_attention: ", name,
                    "_host must hold the values of ", name, ", but ", name,
                    "_host[", b, "] = ", values[b], " and ", name, "[", b,
                    "] = ", expected);
    }
    return values;
  }
};

}  // namespace polyops::cpu

#endif  // POLYOPS_CPU_KERNELS_ATTENTION_FLASH_ATTENTION_CPU_H_
