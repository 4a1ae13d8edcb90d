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
    std::vector<int32_t> q_copy, kv_copy;
    const int32_t* cu_q =
        HostMirror(cu_seqlens_q, cu_seqlens_q_host, "cu_seqlens_q", &q_copy);
    const int32_t* cu_kv = HostMirror(cu_seqlens_kv, cu_seqlens_kv_host,
                                      "cu_seqlens_kv", &kv_copy);
    SequenceTable read;
    ReadVarlenSequences(cu_q, cu_kv, batch_, num_tokens_q_, num_tokens_kv_,
                        paged_ ? block_table->data_as<int32_t>() : nullptr,
                        paged_ ? block_table->stride(0) : 0, max_blocks_,
                        block_size_, num_blocks_, &read);
    return read;
  }

 private:
  // `device`'s entries, or, with a host copy, that copy's entries read once
  // into *copy after checking each against `device`.
  const int32_t* HostMirror(const Tensor& device,
                            const std::optional<Tensor>& host, const char* name,
                            std::vector<int32_t>* copy) const {
    if (!host) return device.data_as<int32_t>();
    const int32_t* host_data = host->data_as<int32_t>();
    const int32_t* device_data = device.data_as<int32_t>();
    copy->resize(batch_ + 1);
    for (int64_t b = 0; b <= batch_; ++b) {
      const int32_t value = ReadOnce(host_data + b);
      const int32_t expected = ReadOnce(device_data + b);
      POLYOPS_CHECK(value == expected, "polyops.flash_attention: ", name,
                    "_host must hold the values of ", name, ", but ", name,
                    "_host[", b, "] = ", value, " and ", name, "[", b,
                    "] = ", expected);
      (*copy)[b] = value;
    }
    return copy->data();
  }
};

}  // namespace polyops::cpu

#endif  // POLYOPS_CPU_FLASH_ATTENTION_CPU_H_
