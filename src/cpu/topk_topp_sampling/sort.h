#ifndef POLYOPS_CPU_TOPK_TOPP_SAMPLING_SORT_H_
#define POLYOPS_CPU_TOPK_TOPP_SAMPLING_SORT_H_

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <utility>
#include <vector>

#include "base/topk_topp_sampling.h"
#include "core/dispatch.h"
#include "core/operator.h"
#include "cpu/kernels/sampling/sampling.h"
#include "cpu/runtime/convert.h"
#include "cpu/runtime/parallel.h"

namespace polyops {
namespace cpu {

// Per-thread scratch, kept across calls so that a steady stream of calls
// allocates nothing: 20 bytes per vocabulary entry per OpenMP thread, grown to
// the largest V seen.
struct SamplingScratch {
  std::vector<uint64_t> keys;
  std::vector<uint64_t> spare;  // the radix sort's second buffer
  std::vector<float> weights;

  void Reserve(int64_t vocab) {
    if (keys.size() >= static_cast<size_t>(vocab)) return;
    keys.resize(vocab);
    spare.resize(vocab);
    weights.resize(vocab);
  }
};

inline SamplingScratch& ThreadSamplingScratch() {
  thread_local SamplingScratch scratch;
  return scratch;
}

// Sorts `keys` ascending by their high 32 bits, stably: LSD radix, one pass
// per byte, skipping bytes every key shares. The input is in id order, so
// stability gives the same order as sorting the whole 64-bit keys, in O(n)
// instead of O(n log n) (full sorts of 152k-entry vocabularies dominate).
inline void RadixSortByHighWord(uint64_t* keys, uint64_t* spare, int64_t n) {
  uint32_t counts[4][256] = {};
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t key = static_cast<uint32_t>(keys[i] >> 32);
    ++counts[0][key & 0xff];
    ++counts[1][(key >> 8) & 0xff];
    ++counts[2][(key >> 16) & 0xff];
    ++counts[3][key >> 24];
  }
  uint64_t* src = keys;
  uint64_t* dst = spare;
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 32 + 8 * pass;
    uint32_t* count = counts[pass];
    if (count[(src[0] >> shift) & 0xff] == static_cast<uint32_t>(n)) continue;
    uint32_t offset = 0;
    for (int digit = 0; digit < 256; ++digit) {
      const uint32_t size = count[digit];
      count[digit] = offset;
      offset += size;
    }
    for (int64_t i = 0; i < n; ++i) {
      dst[count[(src[i] >> shift) & 0xff]++] = src[i];
    }
    std::swap(src, dst);
  }
  if (src != keys) std::memcpy(keys, src, sizeof(uint64_t) * n);
}

// One row of the algorithm in base/topk_topp_sampling.h: the token id. `k`
// in [1, vocab].
template <typename T>
int64_t SampleRow(const T* x, int64_t vocab, int64_t k, float p, float u,
                  SamplingScratch& scratch) {
  // (descending key << 32 | id) sorts ascending as (logit desc, id asc), and
  // the keys are distinct, so every sort below has one possible result. NaN
  // logits count as -inf (step 1).
  const auto key_of = [&](int64_t i) {
    float value = Load(x + i);
    if (std::isnan(value)) value = -std::numeric_limits<float>::infinity();
    return (static_cast<uint64_t>(DescendingKey(value)) << 32) |
           static_cast<uint64_t>(i);
  };
  uint64_t* keys = scratch.keys.data();
  if (k * 16 < vocab) {
    // Small k: a max-heap of the k best keys seen. Most tokens lose one
    // compare against its top and cost no write, unlike a full selection.
    int64_t size = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      const uint64_t key = key_of(i);
      if (size < k) {
        keys[size++] = key;
        std::push_heap(keys, keys + size);
      } else if (key < keys[0]) {
        std::pop_heap(keys, keys + k);
        keys[k - 1] = key;
        std::push_heap(keys, keys + k);
      }
    }
    std::sort_heap(keys, keys + k);
    // Tokens tied with the k-th logit are kept too (step 4); the heap kept
    // the lowest ids of the tie, so the rest follow in id order.
    const uint64_t last = keys[k - 1];
    for (int64_t i = 0; i < vocab; ++i) {
      const uint64_t key = key_of(i);
      if ((key >> 32) == (last >> 32) && key > last) keys[k++] = key;
    }
  } else {
    for (int64_t i = 0; i < vocab; ++i) keys[i] = key_of(i);
    RadixSortByHighWord(keys, scratch.spare.data(), vocab);
    while (k < vocab && (keys[k] >> 32) == (keys[k - 1] >> 32)) ++k;
  }
  const float max = FromDescendingKey(static_cast<uint32_t>(keys[0] >> 32));
  constexpr float kInf = std::numeric_limits<float>::infinity();

  float* weights = scratch.weights.data();
  float total = 0.0f;
  for (int64_t j = 0; j < k; ++j) {
    const float value = FromDescendingKey(static_cast<uint32_t>(keys[j] >> 32));
    // Step 3's bad rows: +inf logits share the mass, a row without a finite
    // or +inf logit is uniform; otherwise the specified Exp.
    weights[j] = max == kInf    ? (value == kInf ? 1.0f : 0.0f)
                 : max == -kInf ? 1.0f
                                : SamplingExp(value - max);
    total += weights[j];
  }

  int64_t prefix = k;
  float prefix_mass = total;
  if (p < 1.0f) {
    const float threshold = p * total;
    float cumulative = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      cumulative += weights[j];
      if (cumulative >= threshold) {
        prefix = j + 1;
        prefix_mass = cumulative;
        break;
      }
    }
  }

  // The same sequential sums again, so C_{j+1} here equals the C_{j+1} above
  // bit for bit and the last step always satisfies cumulative == prefix_mass.
  const float target = u * prefix_mass;
  float cumulative = 0.0f;
  int64_t chosen = prefix - 1;
  for (int64_t j = 0; j < prefix; ++j) {
    cumulative += weights[j];
    if (cumulative > target || cumulative == prefix_mass) {
      chosen = j;
      break;
    }
  }
  return static_cast<int64_t>(keys[chosen] & 0xffffffffull);
}

}  // namespace cpu

// Slot 0: per row, the k best (logit, id) keys are kept in a heap when
// top_k < V / 16, else all V keys are radix sorted; then the float32 sums of
// the base header's algorithm. Rows spread over OpenMP threads.
template <>
class Operator<TopkToppSampling, Device::Type::kCpu, 0>
    : public TopkToppSampling {
 public:
  static constexpr const char* kImplementationName = "sort";
  using TopkToppSampling::TopkToppSampling;

  void operator()(const Handle&, const Args& args) const override {
    if (batch_ == 0) return;
    // Data-dependent checks run serially here: an exception must not leave
    // an OpenMP region.
    if (args.top_p.tensor) {
      const float* p = args.top_p.tensor->data_as<float>();
      const int64_t stride = args.top_p.tensor->stride(0);
      for (int64_t b = 0; b < batch_; ++b) {
        const float value = p[b * stride];
        POLYOPS_CHECK(value > 0.0f && value <= 1.0f,
                      "polyops.topk_topp_sampling: top_p values must be in "
                      "(0, 1], got ",
                      value, " at row ", b);
      }
    }
    if (args.uniform) {
      const float* u = args.uniform->data_as<float>();
      const int64_t stride = args.uniform->stride(0);
      for (int64_t b = 0; b < batch_; ++b) {
        const float value = u[b * stride];
        POLYOPS_CHECK(value >= 0.0f && value < 1.0f,
                      "polyops.topk_topp_sampling: uniform values must be in "
                      "[0, 1), got ",
                      value, " at row ", b);
      }
    }

    // An exception must not leave the OpenMP region: a failed allocation of
    // a thread's scratch is rethrown after it.
    std::atomic<bool> out_of_memory{false};
    DispatchDataType<POLYOPS_FLOAT_TYPES>(
        dtype_, "polyops.topk_topp_sampling", [&](auto tag) {
          using T = typename decltype(tag)::type;
          const T* base = args.logits.data_as<T>();
          const bool parallel =
              batch_ * vocab_ >= cpu::kParallelGrain && batch_ > 1;
          cpu::ParallelFor(batch_, parallel, [&](int64_t b) {
            const int64_t k = RowTopK(args.top_k, b);
            const float p =
                args.top_p.tensor
                    ? args.top_p.tensor
                          ->data_as<float>()[b * args.top_p.tensor->stride(0)]
                    : top_p_;
            const float u =
                args.uniform
                    ? args.uniform
                          ->data_as<float>()[b * args.uniform->stride(0)]
                    : cpu::SplitMix64Uniform(*args.seed, b);
            try {
              cpu::SamplingScratch& scratch = cpu::ThreadSamplingScratch();
              scratch.Reserve(vocab_);
              const int64_t token = cpu::SampleRow(base + b * row_stride_,
                                                   vocab_, k, p, u, scratch);
              // V <= INT32_MAX (base header): every id fits an int32 out.
              if (out_dtype_ == DataType::kInt32) {
                args.out->data_as<int32_t>()[b] = static_cast<int32_t>(token);
              } else {
                args.out->data_as<int64_t>()[b] = token;
              }
            } catch (const std::bad_alloc&) {
              out_of_memory.store(true);
            }
          });
        });
    if (out_of_memory.load()) throw std::bad_alloc();
  }

 private:
  int64_t RowTopK(const ScalarOrTensor& top_k, int64_t b) const {
    if (!top_k.tensor) return top_k_;
    const Tensor& tensor = *top_k.tensor;
    const int64_t at = b * tensor.stride(0);
    const int64_t k = tensor.dtype() == DataType::kInt32
                          ? tensor.data_as<int32_t>()[at]
                          : tensor.data_as<int64_t>()[at];
    return (k <= 0 || k >= vocab_) ? vocab_ : k;
  }
};

}  // namespace polyops

#endif  // POLYOPS_CPU_TOPK_TOPP_SAMPLING_SORT_H_
