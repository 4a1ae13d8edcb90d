// What both CPU flash_attention slots share.
#ifndef POLYOPS_CPU_FLASH_ATTENTION_CPU_H_
#define POLYOPS_CPU_FLASH_ATTENTION_CPU_H_

#include <optional>
#include <vector>

#include "base/flash_attention.h"
#include "cpu/attention.h"

namespace polyops::cpu {

class FlashAttentionCpu : public FlashAttention {
 public:
  using FlashAttention::FlashAttention;

 protected:
  // This call's sequences, read (and checked) from cu_seqlens and the block
  // table: data, so read on every call, not at construction.
  SequenceTable ReadSequences(const Tensor& cu_seqlens_q,
                              const Tensor& cu_seqlens_kv,
                              const std::optional<Tensor>& block_table) const {
    SequenceTable read;
    ReadVarlenSequences(cu_seqlens_q.data_as<int32_t>(),
                        cu_seqlens_kv.data_as<int32_t>(), batch_, num_tokens_q_,
                        num_tokens_kv_,
                        paged_ ? block_table->data_as<int32_t>() : nullptr,
                        paged_ ? block_table->stride(0) : 0, max_blocks_,
                        block_size_, num_blocks_, &read);
    return read;
  }
};

}  // namespace polyops::cpu

#endif  // POLYOPS_CPU_FLASH_ATTENTION_CPU_H_
