#ifndef POLYOPS_CPU_PAGED_ATTENTION_OMP_H_
#define POLYOPS_CPU_PAGED_ATTENTION_OMP_H_

#include <vector>

#include "base/paged_attention.h"
#include "core/dispatch.h"
#include "core/operator.h"
#include "cpu/kernels/attention/attention.h"

namespace polyops {

// Slot 0: OpenMP over sequences x kv heads. The query heads of one kv head
// form one tile (cpu::AttendTile with a single query token), so each cached
// key/value row is read and converted once for the whole group; online
// softmax over kv pieces, float32 accumulation.
template <>
class Operator<PagedAttention, Device::Type::kCpu, 0> : public PagedAttention {
 public:
  static constexpr const char* kImplementationName = "omp";
  using PagedAttention::PagedAttention;

  void operator()(const Handle&, const Args& args) const override {
    // The host copies, when given, hold the same values; on CPU either
    // works, and reading them keeps the CPU path the one a device backend
    // takes.
    const Tensor& lens =
        args.seq_lens_host ? *args.seq_lens_host : args.seq_lens;
    const Tensor& table =
        args.block_table_host ? *args.block_table_host : args.block_table;
    const int64_t group = num_heads_ / num_kv_heads_;
    // Lengths and block ids read once each (cpu::SequenceTable).
    cpu::SequenceTable read;
    read.sequences.resize(batch_);
    std::vector<cpu::AttentionTile> tiles;
    int64_t work = 0;
    for (int64_t b = 0; b < batch_; ++b) {
      const char* lens_name = args.seq_lens_host ? "seq_lens_host" : "seq_lens";
      const int64_t len = cpu::ReadIndex(lens, b);
      POLYOPS_CHECK(len >= 0, "polyops.paged_attention: ", lens_name, "[", b,
                    "] must be >= 0, got ", len);
      cpu::AttentionSequence& seq = read.sequences[b];
      seq.q_start = b;
      seq.q_len = 1;
      seq.kv_len = len;
      cpu::CopyBlocks(
          kName, args.block_table_host ? "block_table_host" : "block_table",
          table, b, seq.kv_len, max_blocks_, block_size_, num_blocks_, &read);
      cpu::AppendTiles(seq, b, num_kv_heads_, group, head_size_, &tiles);
      work += seq.kv_len;
    }
    cpu::LinkBlocks(block_size_, &read);
    const std::vector<cpu::AttentionSequence>& sequences = read.sequences;
    const bool parallel =
        work * num_heads_ * head_size_ >= cpu::kAttentionParallelWork;
    DispatchDataType<POLYOPS_FLOAT_TYPES>(
        dtype_, "polyops.paged_attention", [&](auto tag) {
          using T = typename decltype(tag)::type;
          const cpu::AttentionArgs<T> tiles_args{args.query.data_as<T>(),
                                                 args.query.stride(0),
                                                 args.query.stride(1),
                                                 args.out->data_as<T>(),
                                                 args.out->stride(0),
                                                 args.out->stride(1),
                                                 args.key_cache.data_as<T>(),
                                                 args.key_cache.stride(0),
                                                 args.key_cache.stride(1),
                                                 args.key_cache.stride(2),
                                                 args.value_cache.data_as<T>(),
                                                 args.value_cache.stride(0),
                                                 args.value_cache.stride(1),
                                                 args.value_cache.stride(2),
                                                 head_size_,
                                                 group,
                                                 block_size_,
                                                 scale_,
                                                 /*causal=*/false,
                                                 /*window_left=*/-1,
                                                 /*window_right=*/-1};
          cpu::RunTiles(tiles_args, sequences, tiles, parallel);
        });
  }
};

}  // namespace polyops

#endif  // POLYOPS_CPU_PAGED_ATTENTION_OMP_H_
