#ifndef POLYOPS_BASE_FLASH_ATTENTION_H_
#define POLYOPS_BASE_FLASH_ATTENTION_H_

#include <cmath>
#include <cstdint>
#include <optional>

#include "base/index_tensors.h"
#include "core/checks.h"
#include "core/handle.h"
#include "core/instance_cache.h"

namespace polyops {

// Checks cu_seqlens values once they are on the host (data, so at call
// time, by every backend that reads them), widened to int64 from either
// index dtype: both start at 0 and never decrease, cu_seqlens_q ends at
// total_q and, unless total_kv < 0 (paged), cu_seqlens_kv at total_kv.
// ValueError otherwise. Every entry then lies in [0, total_q] (q) or
// [0, total_kv] (unpaged kv), so no later difference can overflow.
inline void CheckCuSeqlens(const int64_t* cu_q, const int64_t* cu_kv,
                           int64_t batch, int64_t total_q, int64_t total_kv) {
  constexpr const char* kOp = "flash_attention";
  const int64_t* cus[2] = {cu_q, cu_kv};
  const char* names[2] = {"cu_seqlens_q", "cu_seqlens_kv"};
  for (int k = 0; k < 2; ++k) {
    POLYOPS_CHECK(cus[k][0] == 0, "polyops.", kOp, ": ", names[k],
                  " must start at 0, got ", names[k], "[0] = ", cus[k][0]);
    for (int64_t b = 0; b < batch; ++b) {
      POLYOPS_CHECK(cus[k][b + 1] >= cus[k][b], "polyops.", kOp, ": ", names[k],
                    " must be non-decreasing, got ", names[k], "[", b + 1,
                    "] = ", cus[k][b + 1], " < ", names[k], "[", b,
                    "] = ", cus[k][b]);
    }
  }
  POLYOPS_CHECK(cu_q[batch] == total_q, "polyops.", kOp,
                ": cu_seqlens_q must end at the number of query tokens ",
                total_q, ", got cu_seqlens_q[", batch, "] = ", cu_q[batch]);
  if (total_kv >= 0) {
    POLYOPS_CHECK(cu_kv[batch] == total_kv, "polyops.", kOp,
                  ": cu_seqlens_kv must end at the number of kv tokens ",
                  total_kv, ", got cu_seqlens_kv[", batch,
                  "] = ", cu_kv[batch]);
  }
}

// flash_attention(query, key, value, *, cu_seqlens_q, ...) -> Tensor
//
// Variable-length (packed, token-major) multi-head attention with grouped
// query heads: out = softmax(scale * q k^T + mask) v per sequence and head,
// accumulated in float32 (float16/bfloat16 inputs compute in float32).
//   query:  [Tq, Hq, D], float16, bfloat16 or float32; the B sequences lie
//           back to back: sequence b owns rows cu_seqlens_q[b] ..
//           cu_seqlens_q[b+1]-1.
//   key, value: query's dtype, either contiguous-by-token [Tkv, Hkv, D]
//           (sequence b owns rows cu_seqlens_kv[b] .. cu_seqlens_kv[b+1]-1)
//           or, with block_table, paged caches [num_blocks, block_size, Hkv,
//           D]: token j of sequence b lives in block block_table[b][j //
//           block_size] at offset j % block_size. Hq % Hkv == 0 (query head
//           h reads kv head h // (Hq / Hkv)); 1 <= D <= 256
//           (NotImplementedError above).
//   cu_seqlens_q, cu_seqlens_kv: int32 or int64 (each its own) [B+1],
//           contiguous, starting at 0 and non-decreasing; the last entry of
//           cu_seqlens_q is Tq and, without block_table, the last entry of
//           cu_seqlens_kv is Tkv. With block_table cu_seqlens_kv only gives
//           the lengths kv_len[b] = cu_seqlens_kv[b+1] - cu_seqlens_kv[b],
//           which must fit the table (kv_len[b] <= max_blocks *
//           block_size). Values are checked as int64 whatever the dtype,
//           never wrapped to 32 bits.
//   block_table: int32 or int64 [B, max_blocks], last dim contiguous; the
//           blocks a sequence uses must be in [0, num_blocks).
//   scale:  finite; default 1 / sqrt(D).
//   causal: aligned to the END of each kv sequence (the vLLM /
//           FlashAttention convention, so a query chunk continuing a cached
//           prefix works): query i of a sequence may see key j iff
//           j <= i + kv_len - q_len.
//   window_left, window_right: with i' = i + kv_len - q_len, keys are limited
//           to [i' - window_left, i' + window_right]; -1 leaves that side
//           unbounded. sliding_window=W (>= 1) is the same as (W - 1, 0);
//           giving both spellings with different windows is a ValueError.
//   cu_seqlens_q_host, cu_seqlens_kv_host: optional copies of cu_seqlens_q
//           and cu_seqlens_kv in host (CPU) memory, same shape and dtype as
//           the tensor they mirror (ValueError otherwise), as
//           paged_attention's seq_lens_host. The lengths size the work; an
//           accelerator whose attention kernel takes them as host arrays
//           (Ascend's FusedInferAttentionScore) would otherwise need a
//           blocking device-to-host copy, which stalls the stream and
//           cannot be captured in a device graph.
//           They must hold the same values as the device tensors: on CPU
//           that is checked (ValueError), on a device it cannot be without
//           the very copy they avoid, so a mismatch there is not detected
//           and the host values decide the lengths.
//   out:    [Tq, Hq, D], query's dtype, last dim contiguous; allocated
//           contiguous when omitted.
// Any tensor may have any strides in its leading dims; the last dim of
// query, key, value and out must have stride 1. A query row that sees no key
// at all (e.g. q_len > kv_len under the causal mask, or an empty window)
// gets zeros. Malformed cu_seqlens or block ids raise ValueError when the
// call reads them.
// NaN and inf (docs/user/api.md) follow softmax(scores) v in IEEE arithmetic
// over the visible keys: a NaN or +inf score makes its row NaN; a -inf score
// weighs 0, and a row whose visible scores are all -inf is 0 (as SDPA);
// a NaN or inf value reaches the dims it is in, even at weight 0 (0 * inf
// is NaN). Keys outside the causal mask and the window are not part of the
// sum at all: whatever they hold, NaN included, never reaches the output.
class FlashAttention : public OperatorBase {
 public:
  static constexpr const char* kName = "flash_attention";
  static constexpr int kNumPositional = 3;
  // Bounds the kernels' per-thread stack tiles.
  static constexpr int64_t kMaxHeadSize = 256;

  // The call's arguments, in the constructor's order. Slots take them as
  // one struct: a new parameter touches this header and the slots that
  // read it.
  struct Args {
    const Tensor& query;
    const Tensor& key;
    const Tensor& value;
    const Tensor& cu_seqlens_q;
    const Tensor& cu_seqlens_kv;
    const std::optional<Tensor>& block_table;
    std::optional<double> scale;
    bool causal;
    int64_t window_left;
    int64_t window_right;
    std::optional<int64_t> sliding_window;
    const std::optional<Tensor>& cu_seqlens_q_host;
    const std::optional<Tensor>& cu_seqlens_kv_host;
    const std::optional<Tensor>& out;
  };

  FlashAttention(const Tensor& query, const Tensor& key, const Tensor& value,
                 const Tensor& cu_seqlens_q, const Tensor& cu_seqlens_kv,
                 const std::optional<Tensor>& block_table = std::nullopt,
                 std::optional<double> scale = std::nullopt, bool causal = true,
                 int64_t window_left = -1, int64_t window_right = -1,
                 std::optional<int64_t> sliding_window = std::nullopt,
                 const std::optional<Tensor>& cu_seqlens_q_host = std::nullopt,
                 const std::optional<Tensor>& cu_seqlens_kv_host = std::nullopt,
                 const std::optional<Tensor>& out = std::nullopt) {
    const Tensor& output = RequireOutput(kName, "out", out);
    POLYOPS_CHECK(query.ndim() == 3,
                  "polyops.flash_attention: query must have shape [Tq, Hq, "
                  "D], got ",
                  query.ShapeString());
    CheckFloatDtype(kName, "query", query);
    CheckSameDtype(kName, "key", key, "query", query);
    CheckSameDtype(kName, "value", value, "query", query);
    CheckSameDtype(kName, "out", output, "query", query);
    CheckSameShape(kName, "out", output, "query", query);
    paged_ = block_table.has_value();
    const int kv_dims = paged_ ? 4 : 3;
    POLYOPS_CHECK(key.ndim() == kv_dims, "polyops.flash_attention: key must ",
                  paged_ ? "have shape [num_blocks, block_size, Hkv, D] (a "
                           "paged cache, since block_table is given)"
                         : "have shape [Tkv, Hkv, D]",
                  ", got ", key.ShapeString());
    CheckSameShape(kName, "value", value, "key", key);
    num_heads_ = query.size(1);
    head_size_ = query.size(2);
    num_kv_heads_ = key.size(-2);
    POLYOPS_CHECK(
        key.size(-1) == head_size_,
        "polyops.flash_attention: key must have head size D = ", head_size_,
        " (the last dim of query), got ", key.ShapeString());
    POLYOPS_CHECK(
        head_size_ >= 1,
        "polyops.flash_attention: query's head size must be >= 1, got ",
        head_size_);
    POLYOPS_CHECK_T(head_size_ <= kMaxHeadSize, NotImplemented,
                    "polyops.flash_attention is not supported for head size ",
                    head_size_, " because the kernels' tiles hold at most ",
                    kMaxHeadSize);
    POLYOPS_CHECK(
        num_kv_heads_ >= 1 && num_heads_ % num_kv_heads_ == 0,
        "polyops.flash_attention: the number of query heads (", num_heads_,
        ") must be a multiple of the number of kv heads (", num_kv_heads_, ")");
    for (auto [name, tensor] :
         {std::pair{"query", &query}, std::pair{"key", &key},
          std::pair{"value", &value}, std::pair{"out", &output}}) {
      CheckLastDimContiguous(kName, name, *tensor);
    }
    for (auto [name, tensor] : {std::pair{"cu_seqlens_q", &cu_seqlens_q},
                                std::pair{"cu_seqlens_kv", &cu_seqlens_kv}}) {
      CheckIndexDtype(kName, name, *tensor);
      POLYOPS_CHECK(tensor->ndim() == 1 && tensor->size(0) >= 1, "polyops.",
                    kName, ": ", name, " must have shape [B+1], got ",
                    tensor->ShapeString());
      CheckContiguous(kName, name, *tensor);
    }
    CheckSameShape(kName, "cu_seqlens_kv", cu_seqlens_kv, "cu_seqlens_q",
                   cu_seqlens_q);
    CheckHostMirror(kName, "cu_seqlens_q_host", cu_seqlens_q_host,
                    "cu_seqlens_q", cu_seqlens_q);
    CheckHostMirror(kName, "cu_seqlens_kv_host", cu_seqlens_kv_host,
                    "cu_seqlens_kv", cu_seqlens_kv);
    if (cu_seqlens_q_host) {
      CheckContiguous(kName, "cu_seqlens_q_host", *cu_seqlens_q_host);
    }
    if (cu_seqlens_kv_host) {
      CheckContiguous(kName, "cu_seqlens_kv_host", *cu_seqlens_kv_host);
    }
    batch_ = cu_seqlens_q.size(0) - 1;
    if (paged_) {
      const Tensor& table = *block_table;
      CheckIndexDtype(kName, "block_table", table);
      POLYOPS_CHECK(table.ndim() == 2 && table.size(0) == batch_,
                    "polyops.flash_attention: block_table must have shape [",
                    batch_, ", max_blocks] (B from cu_seqlens_q), got ",
                    table.ShapeString());
      CheckLastDimContiguous(kName, "block_table", table);
      POLYOPS_CHECK(key.size(1) >= 1,
                    "polyops.flash_attention: key's block size must be >= 1, "
                    "got ",
                    key.ShapeString());
      max_blocks_ = table.size(1);
      block_size_ = key.size(1);
      num_blocks_ = key.size(0);
    }
    if (scale.has_value()) {
      POLYOPS_CHECK(std::isfinite(*scale),
                    "polyops.flash_attention: scale must be finite, got ",
                    *scale);
      scale_ = static_cast<float>(*scale);
    } else {
      scale_ = static_cast<float>(1.0 / std::sqrt(double(head_size_)));
    }
    POLYOPS_CHECK(window_left >= -1 && window_right >= -1,
                  "polyops.flash_attention: window_left and window_right must "
                  "be >= -1 (-1 = unbounded), got (",
                  window_left, ", ", window_right, ")");
    window_left_ = window_left;
    window_right_ = window_right;
    if (sliding_window.has_value()) {
      POLYOPS_CHECK(*sliding_window >= 1,
                    "polyops.flash_attention: sliding_window must be >= 1, "
                    "got ",
                    *sliding_window);
      const bool explicit_pair = window_left != -1 || window_right != -1;
      POLYOPS_CHECK(
          !explicit_pair ||
              (window_left == *sliding_window - 1 && window_right == 0),
          "polyops.flash_attention: sliding_window=", *sliding_window,
          " means (window_left, window_right) = (", *sliding_window - 1,
          ", 0), which disagrees with the "
          "given (",
          window_left, ", ", window_right, ")");
      window_left_ = *sliding_window - 1;
      window_right_ = 0;
    }
    causal_ = causal;
    num_tokens_q_ = query.size(0);
    num_tokens_kv_ = paged_ ? -1 : key.size(0);
    dtype_ = query.dtype();
  }

  explicit FlashAttention(const Args& args)
      : FlashAttention(args.query, args.key, args.value, args.cu_seqlens_q,
                       args.cu_seqlens_kv, args.block_table, args.scale,
                       args.causal, args.window_left, args.window_right,
                       args.sliding_window, args.cu_seqlens_q_host,
                       args.cu_seqlens_kv_host, args.out) {}

  virtual void operator()(const Handle& handle, const Args& args) const = 0;

  static TensorMeta DefaultOut(
      const Tensor& query, const Tensor& /*key*/, const Tensor& /*value*/,
      const Tensor& /*cu_seqlens_q*/, const Tensor& /*cu_seqlens_kv*/,
      const std::optional<Tensor>& /*block_table*/,
      std::optional<double> /*scale*/, bool /*causal*/, int64_t /*window_left*/,
      int64_t /*window_right*/, std::optional<int64_t> /*sliding_window*/,
      const std::optional<Tensor>& /*cu_seqlens_q_host*/,
      const std::optional<Tensor>& /*cu_seqlens_kv_host*/) {
    return MetaLike(query);
  }

 protected:
  int64_t batch_ = 0;
  int64_t num_heads_ = 0;
  int64_t num_kv_heads_ = 0;
  int64_t head_size_ = 0;
  int64_t num_tokens_q_ = 0;
  int64_t num_tokens_kv_ = -1;  // -1 when paged
  bool paged_ = false;
  int64_t max_blocks_ = 0;  // paged only
  int64_t block_size_ = 0;  // paged only
  int64_t num_blocks_ = 0;  // paged only
  float scale_ = 1.0f;
  bool causal_ = true;
  // The window after resolving sliding_window: kernels read only these.
  int64_t window_left_ = -1;
  int64_t window_right_ = -1;
  DataType dtype_ = DataType::kFloat32;
};

}  // namespace polyops

#endif  // POLYOPS_BASE_FLASH_ATTENTION_H_
