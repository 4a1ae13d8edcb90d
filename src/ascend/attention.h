// What the Ascend attention slots share: aclnnFusedInferAttentionScoreV3
// with inputLayout "TND", the sequence lengths it takes as host arrays, and
// its causal mask.
#ifndef POLYOPS_ASCEND_ATTENTION_H_
#define POLYOPS_ASCEND_ATTENTION_H_

#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "ascend/launch.h"
#include "core/error.h"
#include "core/handle.h"
#include "core/tensor.h"

namespace polyops::ascend {

// FIA V3 (ASCEND.md §3.3). V3, not V4: V4's prototype changed under the
// same name within 8.3.RC1 (trap 3), V3 is the same from 8.1.RC1.beta1 to
// 8.5.0, and torch_npu itself calls V3 on A2/A3.
inline constexpr const char* kFiaApi = "aclnnFusedInferAttentionScoreV3";
inline constexpr const char* kFiaSince = "8.1.RC1.beta1";
// torch_npu's default preTokens/nextTokens: no limit on that side.
inline constexpr int64_t kFiaUnbounded = 2147483647;
// The compressed causal mask of sparseMode 3 and 4: 2048 x 2048 bool,
// 1 = masked, triu(diagonal=1); the kernel derives the pattern from it.
inline constexpr int64_t kFiaMaskSize = 2048;
// innerPrecise 2 = high precision with "row invalid" correction: a query
// row the mask hides entirely gets zeros, polyops' rule. Read from the FIA
// and IFA docs' description of values 0-3, not in ASCEND.md: unverified,
// and the double ignores it.
inline constexpr int64_t kFiaInnerPrecise = 2;

// sparseMode values FIA takes (docs sparse_mode参数说明).
enum class FiaSparseMode : int64_t {
  kNone = 0,             // no mask
  kRightDownCausal = 3,  // causal, aligned to the end of each kv sequence
  kBand = 4,             // keys [diag - preTokens, diag + nextTokens]
};

// One FIA call in TND layout. key/value are already the views FIA reads:
// [T_kv, N_kv, D] unpaged, or a paged cache as PagedCacheView gives it.
struct FiaCall {
  Tensor query;  // [T, N, D]
  Tensor key;
  Tensor value;
  const Tensor* block_table = nullptr;  // int32 [B, max_blocks], paged only
  Tensor out;                           // [T, N, D]
  // Host values: cumulative query ends (last == T) and, unpaged,
  // cumulative kv ends or, paged, per-request kv lengths.
  std::vector<int64_t> q_ends;
  std::vector<int64_t> kv_lengths;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  double scale = 1.0;
  FiaSparseMode sparse_mode = FiaSparseMode::kNone;
  int64_t pre_tokens = kFiaUnbounded;
  int64_t next_tokens = kFiaUnbounded;
  int64_t block_size = 0;  // paged only
};

// FIA V3 and IFA V4 take float16 and bfloat16 queries (and int8, which
// polyops does not use): NotImplementedError naming the dtype otherwise.
inline void CheckFiaDtype(const char* op, const char* api, DataType dtype) {
  POLYOPS_CHECK_T(dtype == DataType::kFloat16 || dtype == DataType::kBFloat16,
                  NotImplemented, "polyops.", op, " on npu (", api,
                  ") is not supported for dtype ", DataTypeName(dtype),
                  ": the API takes float16 and bfloat16 queries only");
}

// A paged cache [num_blocks, block_size, N_kv, D] (D contiguous) as FIA
// reads it: [num_blocks, block_size, N_kv * D] when heads and D merge
// (vLLM's NHD caches), else the permuted view [num_blocks, N_kv,
// block_size, D] (vLLM's HND caches, which are that layout in memory). FIA
// documents both forms; neither copies.
inline Tensor PagedCacheView(const Tensor& cache) {
  const int64_t blocks = cache.size(0), block_size = cache.size(1);
  const int64_t heads = cache.size(2), head_size = cache.size(3);
  if (heads == 1 || cache.stride(2) == head_size) {
    const int64_t shape[3] = {blocks, block_size, heads * head_size};
    const int64_t strides[3] = {cache.stride(0), cache.stride(1), 1};
    return Tensor::FromParts(cache.data(), 3, shape, strides, cache.dtype(),
                             cache.device());
  }
  const int64_t shape[4] = {blocks, heads, block_size, head_size};
  const int64_t strides[4] = {cache.stride(0), cache.stride(2), cache.stride(1),
                              1};
  return Tensor::FromParts(cache.data(), 4, shape, strides, cache.dtype(),
                           cache.device());
}

// The int32 entries of `device` (contiguous [n]) on the host: read from
// `host`, its CPU copy, when the caller gave one, else copied from the
// device after synchronizing handle.stream (the cost that *_host avoids).
inline std::vector<int32_t> HostInts(const Handle& handle, const Tensor& device,
                                     const std::optional<Tensor>& host,
                                     const char* op) {
  std::vector<int32_t> values(device.numel());
  if (host) {
    std::memcpy(values.data(), host->data(), values.size() * sizeof(int32_t));
  } else {
    CopyToHost(handle, values.data(), device.data(),
               values.size() * sizeof(int32_t), op);
  }
  return values;
}

// paged_attention's seq_lens on the host (HostInts), checked as the CPU
// kernel checks them (ValueError): 0 <= seq_lens[b] <= max_blocks *
// block_size. The block ids stay on the device, unchecked.
inline std::vector<int64_t> CheckedSeqLens(const Handle& handle,
                                           const Tensor& seq_lens,
                                           const std::optional<Tensor>& host,
                                           int64_t max_blocks,
                                           int64_t block_size) {
  const std::vector<int32_t> lens =
      HostInts(handle, seq_lens, host, "paged_attention");
  const char* name = host ? "seq_lens_host" : "seq_lens";
  for (size_t b = 0; b < lens.size(); ++b) {
    POLYOPS_CHECK(lens[b] >= 0, "polyops.paged_attention: ", name, "[", b,
                  "] must be >= 0, got ", lens[b]);
    POLYOPS_CHECK(lens[b] <= max_blocks * block_size,
                  "polyops.paged_attention: sequence ", b, " has ", lens[b],
                  " kv tokens, more than its block_table row holds (",
                  max_blocks, " blocks of ", block_size, ")");
  }
  return std::vector<int64_t>(lens.begin(), lens.end());
}

inline void FillCausalMask(void* host, size_t /*bytes*/) {
  auto* mask = static_cast<unsigned char*>(host);
  for (int64_t i = 0; i < kFiaMaskSize; ++i) {
    for (int64_t j = 0; j < kFiaMaskSize; ++j) {
      mask[i * kFiaMaskSize + j] = j > i ? 1 : 0;
    }
  }
}

// Runs one FIA V3 call on handle.stream (see OneShotCall: the lengths are
// host values phase 1 bakes into the executor, so phase 1 runs every call).
inline void RunFusedInferAttention(const char* op, const Handle& handle,
                                   const FiaCall& call) {
  using Fn = AclnnStatus (*)(
      const AclTensor* query, const AclTensorList* key,
      const AclTensorList* value, const AclTensor* pse_shift,
      const AclTensor* atten_mask, const AclIntArray* actual_seq_lengths,
      const AclIntArray* actual_seq_lengths_kv, const AclTensor* deq_scale1,
      const AclTensor* quant_scale1, const AclTensor* deq_scale2,
      const AclTensor* quant_scale2, const AclTensor* quant_offset2,
      const AclTensor* antiquant_scale, const AclTensor* antiquant_offset,
      const AclTensor* block_table, const AclTensor* query_padding_size,
      const AclTensor* kv_padding_size, const AclTensor* key_antiquant_scale,
      const AclTensor* key_antiquant_offset,
      const AclTensor* value_antiquant_scale,
      const AclTensor* value_antiquant_offset,
      const AclTensor* key_shared_prefix, const AclTensor* value_shared_prefix,
      const AclIntArray* actual_shared_prefix_len, const AclTensor* query_rope,
      const AclTensor* key_rope, const AclTensor* key_rope_antiquant_scale,
      int64_t num_heads, double scale_value, int64_t pre_tokens,
      int64_t next_tokens, char* input_layout, int64_t num_key_value_heads,
      int64_t sparse_mode, int64_t inner_precise, int64_t block_size,
      int64_t antiquant_mode, bool softmax_lse_flag, int64_t key_antiquant_mode,
      int64_t value_antiquant_mode, const AclTensor* attention_out,
      const AclTensor* softmax_lse, uint64_t* workspace_size,
      AclOpExecutor** executor);
  static const auto get =
      Phase1<Fn>("aclnnFusedInferAttentionScoreV3GetWorkspaceSize", kFiaSince);
  static const auto launch = Phase2(kFiaApi, kFiaSince);

  OneShotCall one(op);
  AclTensor* query = one.Describe(call.query);
  AclTensorList* key = one.DescribeList({call.key});
  AclTensorList* value = one.DescribeList({call.value});
  AclTensor* mask = nullptr;
  if (call.sparse_mode != FiaSparseMode::kNone) {
    // Made once per process and device, never per call.
    const void* data =
        ProcessConstant("fia_causal_mask", handle.device.index,
                        kFiaMaskSize * kFiaMaskSize, &FillCausalMask);
    const int64_t shape[2] = {kFiaMaskSize, kFiaMaskSize};
    const int64_t strides[2] = {kFiaMaskSize, 1};
    mask = one.Describe(Tensor::FromParts(const_cast<void*>(data), 2, shape,
                                          strides, DataType::kBool,
                                          handle.device));
  }
  AclTensor* table =
      call.block_table ? one.Describe(*call.block_table) : nullptr;
  AclTensor* out = one.Describe(call.out);
  AclIntArray* q_ends = one.IntArray(call.q_ends);
  AclIntArray* kv_lengths = one.IntArray(call.kv_lengths);
  char layout[] = "TND";
  uint64_t workspace = 0;
  AclOpExecutor* executor = nullptr;
  const AclnnStatus status = get(
      query, key, value, /*pse_shift=*/nullptr, mask, q_ends, kv_lengths,
      nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, table,
      nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
      nullptr, nullptr, nullptr, nullptr, call.num_heads, call.scale,
      call.pre_tokens, call.next_tokens, layout, call.num_kv_heads,
      static_cast<int64_t>(call.sparse_mode), kFiaInnerPrecise, call.block_size,
      /*antiquant_mode=*/0, /*softmax_lse_flag=*/false,
      /*key_antiquant_mode=*/0, /*value_antiquant_mode=*/0, out,
      /*softmax_lse=*/nullptr, &workspace, &executor);
  one.Launch(handle, kFiaApi, status, workspace, executor, launch);
}

}  // namespace polyops::ascend

#endif  // POLYOPS_ASCEND_ATTENTION_H_
