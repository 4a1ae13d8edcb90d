#ifndef POLYOPS_BASE_PAGED_ATTENTION_H_
#define POLYOPS_BASE_PAGED_ATTENTION_H_

#include <cmath>
#include <cstdint>
#include <optional>

#include "base/index_tensors.h"
#include "core/checks.h"
#include "core/handle.h"
#include "core/instance_cache.h"

namespace polyops {

// paged_attention(query, key_cache, value_cache, seq_lens, block_table, ...)
//
// Decode attention over a paged kv cache: the one new query token of each
// sequence attends to all of that sequence's cached tokens (it is the last
// token, so no causal mask applies): out[b, h] = softmax(scale * q k^T) v
// over keys 0 .. seq_lens[b]-1, accumulated in float32 (float16/bfloat16
// inputs compute in float32).
//   query:  [B, Hq, D], float16, bfloat16 or float32.
//   key_cache, value_cache: [num_blocks, block_size, Hkv, D], query's dtype;
//           token j of sequence b lives in block block_table[b][j //
//           block_size] at offset j % block_size. Hq % Hkv == 0 (query head
//           h reads kv head h // (Hq / Hkv)); 1 <= D <= 256
//           (NotImplementedError above).
//   seq_lens: int32 or int64 [B], contiguous; 0 <= seq_lens[b] <=
//           max_blocks * block_size (ValueError otherwise). A sequence of
//           length 0 gets zeros.
//   block_table: int32 or int64 [B, max_blocks], last dim contiguous; the
//           blocks a sequence uses must be in [0, num_blocks) (ValueError
//           otherwise). Lengths and block ids are checked as int64 whatever
//           the dtype, never wrapped to 32 bits.
//   scale:  finite; default 1 / sqrt(D).
//   seq_lens_host, block_table_host: optional copies of seq_lens and
//           block_table in host (CPU) memory, same shape and dtype as the
//           tensor they mirror. The lengths and block ids decide how much
//           work each sequence gets; an accelerator implementation that had
//           to read them from device memory would need a blocking
//           device-to-host copy, which stalls the stream and makes the op
//           impossible to capture in a device graph (CUDA graphs, ACL
//           graphs). Serving engines keep these copies on the host anyway,
//           so passing them lets the kernel be sized without touching the
//           device. They must hold the same values as the device tensors
//           (not checked). On CPU they are simply read instead of seq_lens
//           / block_table.
//   out:    [B, Hq, D], query's dtype, last dim contiguous; allocated
//           contiguous when omitted.
// query, the caches and out may have any strides in their leading dims; the
// last dim must have stride 1.
// NaN and inf as in flash_attention: IEEE softmax(scores) v over the
// sequence's keys, a row whose scores are all -inf is 0, and cache slots
// past seq_lens[b] are never read.
class PagedAttention : public OperatorBase {
 public:
  static constexpr const char* kName = "paged_attention";
  static constexpr int kNumPositional = 5;
  // Bounds the kernels' per-thread stack tiles.
  static constexpr int64_t kMaxHeadSize = 256;

  // The call's arguments, in the constructor's order. Slots take them as
  // one struct: a new parameter touches this header and the slots that
  // read it.
  struct Args {
    const Tensor& query;
    const Tensor& key_cache;
    const Tensor& value_cache;
    const Tensor& seq_lens;
    const Tensor& block_table;
    std::optional<double> scale;
    const std::optional<Tensor>& seq_lens_host;
    const std::optional<Tensor>& block_table_host;
    const std::optional<Tensor>& out;
  };

  PagedAttention(const Tensor& query, const Tensor& key_cache,
                 const Tensor& value_cache, const Tensor& seq_lens,
                 const Tensor& block_table,
                 std::optional<double> scale = std::nullopt,
                 const std::optional<Tensor>& seq_lens_host = std::nullopt,
                 const std::optional<Tensor>& block_table_host = std::nullopt,
                 const std::optional<Tensor>& out = std::nullopt) {
    const Tensor& output = RequireOutput(kName, "out", out);
    POLYOPS_CHECK(query.ndim() == 3,
                  "polyops.paged_attention: query must have shape [B, Hq, D], "
                  "got ",
                  query.ShapeString());
    CheckFloatDtype(kName, "query", query);
    CheckSameDtype(kName, "key_cache", key_cache, "query", query);
    CheckSameDtype(kName, "value_cache", value_cache, "query", query);
    CheckSameDtype(kName, "out", output, "query", query);
    CheckSameShape(kName, "out", output, "query", query);
    POLYOPS_CHECK(key_cache.ndim() == 4,
                  "polyops.paged_attention: key_cache must have shape "
                  "[num_blocks, block_size, Hkv, D], got ",
                  key_cache.ShapeString());
    CheckSameShape(kName, "value_cache", value_cache, "key_cache", key_cache);
    batch_ = query.size(0);
    num_heads_ = query.size(1);
    head_size_ = query.size(2);
    num_blocks_ = key_cache.size(0);
    block_size_ = key_cache.size(1);
    num_kv_heads_ = key_cache.size(2);
    POLYOPS_CHECK(key_cache.size(3) == head_size_,
                  "polyops.paged_attention: key_cache must have head size D = ",
                  head_size_, " (the last dim of query), got ",
                  key_cache.ShapeString());
    POLYOPS_CHECK(
        head_size_ >= 1,
        "polyops.paged_attention: query's head size must be >= 1, got ",
        head_size_);
    POLYOPS_CHECK_T(head_size_ <= kMaxHeadSize, NotImplemented,
                    "polyops.paged_attention is not supported for head size ",
                    head_size_, " because the kernels' tiles hold at most ",
                    kMaxHeadSize);
    POLYOPS_CHECK(
        num_kv_heads_ >= 1 && num_heads_ % num_kv_heads_ == 0,
        "polyops.paged_attention: the number of query heads (", num_heads_,
        ") must be a multiple of the number of kv heads (", num_kv_heads_, ")");
    POLYOPS_CHECK(block_size_ >= 1,
                  "polyops.paged_attention: key_cache's block size must be >= "
                  "1, got ",
                  key_cache.ShapeString());
    for (auto [name, tensor] :
         {std::pair{"query", &query}, std::pair{"key_cache", &key_cache},
          std::pair{"value_cache", &value_cache}, std::pair{"out", &output}}) {
      CheckLastDimContiguous(kName, name, *tensor);
    }
    CheckIndexDtype(kName, "seq_lens", seq_lens);
    POLYOPS_CHECK(seq_lens.ndim() == 1 && seq_lens.size(0) == batch_,
                  "polyops.paged_attention: seq_lens must have shape [", batch_,
                  "] (B from query), got ", seq_lens.ShapeString());
    CheckContiguous(kName, "seq_lens", seq_lens);
    CheckIndexDtype(kName, "block_table", block_table);
    POLYOPS_CHECK(block_table.ndim() == 2 && block_table.size(0) == batch_,
                  "polyops.paged_attention: block_table must have shape [",
                  batch_, ", max_blocks] (B from query), got ",
                  block_table.ShapeString());
    CheckLastDimContiguous(kName, "block_table", block_table);
    max_blocks_ = block_table.size(1);
    CheckHostMirror(kName, "seq_lens_host", seq_lens_host, "seq_lens",
                    seq_lens);
    CheckHostMirror(kName, "block_table_host", block_table_host, "block_table",
                    block_table);
    if (seq_lens_host.has_value()) {
      CheckContiguous(kName, "seq_lens_host", *seq_lens_host);
    }
    if (scale.has_value()) {
      POLYOPS_CHECK(std::isfinite(*scale),
                    "polyops.paged_attention: scale must be finite, got ",
                    *scale);
      scale_ = static_cast<float>(*scale);
    } else {
      scale_ = static_cast<float>(1.0 / std::sqrt(double(head_size_)));
    }
    dtype_ = query.dtype();
  }

  explicit PagedAttention(const Args& args)
      : PagedAttention(args.query, args.key_cache, args.value_cache,
                       args.seq_lens, args.block_table, args.scale,
                       args.seq_lens_host, args.block_table_host, args.out) {}

  virtual void operator()(const Handle& handle, const Args& args) const = 0;

  static TensorMeta DefaultOut(
      const Tensor& query, const Tensor& /*key_cache*/,
      const Tensor& /*value_cache*/, const Tensor& /*seq_lens*/,
      const Tensor& /*block_table*/, std::optional<double> /*scale*/,
      const std::optional<Tensor>& /*seq_lens_host*/,
      const std::optional<Tensor>& /*block_table_host*/) {
    return MetaLike(query);
  }

 protected:
  int64_t batch_ = 0;
  int64_t num_heads_ = 0;
  int64_t num_kv_heads_ = 0;
  int64_t head_size_ = 0;
  int64_t num_blocks_ = 0;
  int64_t block_size_ = 0;
  int64_t max_blocks_ = 0;
  float scale_ = 1.0f;
  DataType dtype_ = DataType::kFloat32;
};

}  // namespace polyops

#endif  // POLYOPS_BASE_PAGED_ATTENTION_H_
