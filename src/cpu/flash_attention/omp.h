#ifndef POLYOPS_CPU_FLASH_ATTENTION_OMP_H_
#define POLYOPS_CPU_FLASH_ATTENTION_OMP_H_

#include <vector>

#include "base/flash_attention.h"
#include "core/dispatch.h"
#include "core/operator.h"
#include "cpu/kernels/attention/attention.h"
#include "cpu/kernels/attention/flash_attention_cpu.h"

namespace polyops {

// Slot 1: blocked online softmax (cpu::AttendTile). Tiles of query tokens x
// the query heads of one kv head stream the kv tiles they can see (tiles
// wholly outside the causal / window range are skipped), spread over OpenMP
// threads by (sequence, kv head, query tile); AVX2 / AVX-512 variants chosen
// at run time.
template <>
class Operator<FlashAttention, Device::Type::kCpu, 1>
    : public cpu::FlashAttentionCpu {
 public:
  static constexpr const char* kImplementationName = "omp";
  using cpu::FlashAttentionCpu::FlashAttentionCpu;

  void operator()(const Handle&, const Args& args) const override {
    const cpu::SequenceTable read =
        ReadSequences(args.cu_seqlens_q, args.cu_seqlens_kv, args.block_table,
                      args.cu_seqlens_q_host, args.cu_seqlens_kv_host);
    const std::vector<cpu::AttentionSequence>& sequences = read.sequences;
    const int64_t group = num_heads_ / num_kv_heads_;
    std::vector<cpu::AttentionTile> tiles;
    int64_t work = 0;
    for (int64_t b = 0; b < batch_; ++b) {
      cpu::AppendTiles(sequences[b], b, num_kv_heads_, group, head_size_,
                       &tiles);
      work += sequences[b].q_len * sequences[b].kv_len;
    }
    const bool parallel =
        work * num_heads_ * head_size_ >= cpu::kAttentionParallelWork;
    DispatchDataType<POLYOPS_FLOAT_TYPES>(
        dtype_, "polyops.flash_attention", [&](auto tag) {
          using T = typename decltype(tag)::type;
          const int kv_token_dim = paged_ ? 1 : 0;
          const cpu::AttentionArgs<T> tiles_args{
              args.query.data_as<T>(),
              args.query.stride(0),
              args.query.stride(1),
              args.out->data_as<T>(),
              args.out->stride(0),
              args.out->stride(1),
              args.key.data_as<T>(),
              paged_ ? args.key.stride(0) : 0,
              args.key.stride(kv_token_dim),
              args.key.stride(-2),
              args.value.data_as<T>(),
              paged_ ? args.value.stride(0) : 0,
              args.value.stride(kv_token_dim),
              args.value.stride(-2),
              head_size_,
              group,
              paged_ ? block_size_ : 0,
              scale_,
              causal_,
              window_left_,
              window_right_};
          cpu::RunTiles(tiles_args, sequences, tiles, parallel);
        });
  }
};

}  // namespace polyops

#endif  // POLYOPS_CPU_FLASH_ATTENTION_OMP_H_
