#ifndef POLYOPS_CPU_FLASH_ATTENTION_LOOP_H_
#define POLYOPS_CPU_FLASH_ATTENTION_LOOP_H_

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/flash_attention.h"
#include "core/dispatch.h"
#include "core/operator.h"
#include "cpu/kernels/attention/attention.h"
#include "cpu/kernels/attention/flash_attention_cpu.h"
#include "cpu/runtime/convert.h"

namespace polyops {

// Slot 0: the reference. One query row at a time on one thread: the scores
// of its visible keys, their softmax, the weighted sum of values, all in
// float32.
template <>
class Operator<FlashAttention, Device::Type::kCpu, 0>
    : public cpu::FlashAttentionCpu {
 public:
  static constexpr const char* kImplementationName = "loop";
  using cpu::FlashAttentionCpu::FlashAttentionCpu;

  void operator()(const Handle&, const Args& args) const override {
    const cpu::SequenceTable read =
        ReadSequences(args.cu_seqlens_q, args.cu_seqlens_kv, args.block_table,
                      args.cu_seqlens_q_host, args.cu_seqlens_kv_host);
    const std::vector<cpu::AttentionSequence>& sequences = read.sequences;
    DispatchDataType<POLYOPS_FLOAT_TYPES>(
        dtype_, "polyops.flash_attention", [&](auto tag) {
          using T = typename decltype(tag)::type;
          const int64_t group = num_heads_ / num_kv_heads_;
          const int kv_token_dim = paged_ ? 1 : 0;
          std::vector<float> scores;
          std::vector<float> accumulator(head_size_);
          for (const cpu::AttentionSequence& seq : sequences) {
            scores.resize(seq.kv_len);
            for (int64_t h = 0; h < num_heads_; ++h) {
              const int64_t kv_head = h / group;
              for (int64_t i = 0; i < seq.q_len; ++i) {
                const T* q = args.query.data_as<T>() +
                             (seq.q_start + i) * args.query.stride(0) +
                             h * args.query.stride(1);
                const cpu::KeyRange range =
                    cpu::VisibleKeys(i, seq.q_len, seq.kv_len, causal_,
                                     window_left_, window_right_);
                float max_score = -INFINITY;
                for (int64_t j = range.lo; j <= range.hi; ++j) {
                  const T* k = cpu::KvRow(
                      args.key.data_as<T>(), paged_ ? args.key.stride(0) : 0,
                      args.key.stride(kv_token_dim), args.key.stride(-2), seq,
                      block_size_, j, kv_head);
                  float dot = 0.0f;
                  for (int64_t d = 0; d < head_size_; ++d) {
                    dot += cpu::Load(q + d) * cpu::Load(k + d);
                  }
                  scores[j] = dot * scale_;
                  max_score = std::max(max_score, scores[j]);
                }
                // All visible scores -inf: weights exp(-inf - 0) = 0 and a
                // zero row (SDPA's rule), not exp(-inf + inf) = NaN. A NaN
                // score, which std::max skips, still makes its exp NaN.
                const float shift = max_score == -INFINITY ? 0.0f : max_score;
                float sum = 0.0f;
                std::fill(accumulator.begin(), accumulator.end(), 0.0f);
                for (int64_t j = range.lo; j <= range.hi; ++j) {
                  const float p = std::exp(scores[j] - shift);
                  sum += p;
                  const T* v = cpu::KvRow(args.value.data_as<T>(),
                                          paged_ ? args.value.stride(0) : 0,
                                          args.value.stride(kv_token_dim),
                                          args.value.stride(-2), seq,
                                          block_size_, j, kv_head);
                  for (int64_t d = 0; d < head_size_; ++d) {
                    accumulator[d] += p * cpu::Load(v + d);
                  }
                }
                // Sum 0 (no key visible, or all -inf): zeros, or NaN where
                // 0 * inf reached the accumulator. A NaN sum stays NaN.
                const float inverse = sum == 0.0f ? 0.0f : 1.0f / sum;
                T* o = args.out->data_as<T>() +
                       (seq.q_start + i) * args.out->stride(0) +
                       h * args.out->stride(1);
                for (int64_t d = 0; d < head_size_; ++d) {
                  cpu::Store(o + d, accumulator[d] * inverse);
                }
              }
            }
          }
        });
  }
};

}  // namespace polyops

#endif  // POLYOPS_CPU_FLASH_ATTENTION_LOOP_H_
