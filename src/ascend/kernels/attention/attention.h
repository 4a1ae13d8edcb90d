// What the Ascend attention slots share: aclnnFusedInferAttentionScoreV3
// with inputLayout "TND", the sequence lengths it takes as host arrays, its
// causal mask, and the int32 block table FIA and IFA read on the device.
#ifndef POLYOPS_ASCEND_KERNELS_ATTENTION_ATTENTION_H_
#define POLYOPS_ASCEND_KERNELS_ATTENTION_ATTENTION_H_

#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "ascend/kernels/sampling/sampling.h"
#include "ascend/runtime/launch.h"
#include "base/index_tensors.h"
#include "core/error.h"
#include "core/handle.h"
#include "core/tensor.h"

namespace polyops::ascend {

// FIA V3. V3, not V4: V4's prototype changed under the same name within
// 8.3.RC1 (docs/backends/ascend.md, trap "Prototype drift"), V3 is the same
// from 8.1.RC1.beta1 to 8.5.0, and torch_npu itself calls V3 on A2/A3.
inline constexpr const char* kFiaApi = "aclnnFusedInferAttentionScoreV3";
inline constexpr const char* kFiaSince = "8.1.RC1.beta1";
// torch_npu's default preTokens/nextTokens: no limit on that side.
inline constexpr int64_t kFiaUnbounded = 2147483647;
// The compressed causal mask of sparseMode 3 and 4: 2048 x 2048 bool,
// 1 = masked, triu(diagonal=1); the kernel derives the pattern from it.
inline constexpr int64_t kFiaMaskSize = 2048;
// innerPrecise 2 = high precision with "row invalid" correction: a query
// row the mask hides entirely gets zeros, polyops' rule. Read from the FIA
// and IFA docs' description of values 0-3: unverified,
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
  // int32 or int64 [B, max_blocks], paged only (RunPagedApi).
  const Tensor* block_table = nullptr;
  Tensor out;  // [T, N, D]
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

// The entries of `device` (contiguous [n], int32 or int64) on the host,
// widened to int64: read from `host`, its CPU copy, when the caller gave
// one, else copied from the device after synchronizing handle.stream (the
// cost that *_host avoids).
inline std::vector<int64_t> HostInts(const Handle& handle, const Tensor& device,
                                     const std::optional<Tensor>& host,
                                     const char* op) {
  if (host) return WidenIndices(host->data(), host->dtype(), host->numel());
  std::vector<char> bytes(device.numel() * device.element_size());
  CopyToHost(handle, bytes.data(), device.data(), bytes.size(), op);
  return WidenIndices(bytes.data(), device.dtype(), device.numel());
}

// paged_attention's seq_lens on the host (HostInts), checked as the CPU
// kernel checks them (ValueError): 0 <= seq_lens[b] <= max_blocks *
// block_size. The block ids stay on the device, unchecked.
inline std::vector<int64_t> CheckedSeqLens(const Handle& handle,
                                           const Tensor& seq_lens,
                                           const std::optional<Tensor>& host,
                                           int64_t max_blocks,
                                           int64_t block_size) {
  const std::vector<int64_t> lens =
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
  return lens;
}

inline void FillCausalMask(void* host, size_t /*bytes*/) {
  auto* mask = static_cast<unsigned char*>(host);
  for (int64_t i = 0; i < kFiaMaskSize; ++i) {
    for (int64_t j = 0; j < kFiaMaskSize; ++j) {
      mask[i * kFiaMaskSize + j] = j > i ? 1 : 0;
    }
  }
}

// The tensors of one FIA or IFA call, in the order of the API's signature:
// key and value go in as one-element tensor lists; `mask` and `table` may
// be absent (no causal mask; unpaged kv).
struct AttentionOperands {
  Tensor query;
  Tensor key;
  Tensor value;
  std::optional<Tensor> mask;
  const Tensor* table = nullptr;  // int32 or int64 [B, max_blocks]
  Tensor out;
};

// Phase 1 of FIA or IFA over descriptors of AttentionOperands (mask, table
// null when absent); `context` carries the call's host values (lengths).
using AttentionPhase1 = AclnnStatus (*)(void* context, AclTensor* query,
                                        AclTensorList* key,
                                        AclTensorList* value, AclTensor* mask,
                                        AclTensor* table, AclTensor* out,
                                        uint64_t* workspace,
                                        AclOpExecutor** executor);

// Runs one FIA or IFA call on handle.stream. The lengths are host values
// phase 1 bakes into the executor, so phase 1 runs every call.
//   int32 or no block table: one OneShotCall (a non-repeatable executor).
//   int64 block table: FIA and IFA take blockTable as INT32 only, so the
//     table is clamped to int32's range (aclnnClamp: an id no int32 holds
//     stays an id outside the cache instead of wrapping onto a valid block)
//     and cast (aclnnCast) into the stream's pool, and the attention launch
//     reads that copy, all in one RunSteps unit (the pool held from the
//     first launch to the last). The executors belong to this call
//     (ExecutorCaches on the stack, the attention executor holding this
//     call's lengths): RunSteps makes them repeatable, and they are
//     destroyed once the launches are queued. Block ids are read on the
//     device only, as in the int32 path: a bad one is a fault at the next
//     synchronization, not a ValueError.
inline void RunPagedApi(const char* op, const char* api, const Handle& handle,
                        const AttentionOperands& o, AttentionPhase1 phase1,
                        void* context, LaunchFn launch) {
  if (o.table == nullptr || o.table->dtype() == DataType::kInt32) {
    OneShotCall one(op);
    AclTensor* query = one.Describe(o.query);
    AclTensorList* key = one.DescribeList({o.key});
    AclTensorList* value = one.DescribeList({o.value});
    AclTensor* mask = o.mask ? one.Describe(*o.mask) : nullptr;
    AclTensor* table = o.table ? one.Describe(*o.table) : nullptr;
    AclTensor* out = one.Describe(o.out);
    uint64_t workspace = 0;
    AclOpExecutor* executor = nullptr;
    const AclnnStatus status = phase1(context, query, key, value, mask, table,
                                      out, &workspace, &executor);
    one.Launch(handle, api, status, workspace, executor, launch);
    return;
  }
  const Tensor& table = *o.table;
  const int64_t strides[2] = {table.size(1), 1};
  const Tensor clamped = Tensor::FromParts(nullptr, 2, table.shape(), strides,
                                           DataType::kInt64, table.device());
  const Tensor table32 = Tensor::FromParts(nullptr, 2, table.shape(), strides,
                                           DataType::kInt32, table.device());
  const int64_t table32_at = ScratchAlign(table.numel() * 8);
  const int64_t scratch_bytes = table32_at + ScratchAlign(table.numel() * 4);
  const Runtime& rt = GetRuntime();
  int64_t low = std::numeric_limits<int32_t>::min();
  int64_t high = std::numeric_limits<int32_t>::max();
  const ScalarHandle low_scalar(rt.create_scalar(&low, AclDataType::kInt64));
  const ScalarHandle high_scalar(rt.create_scalar(&high, AclDataType::kInt64));
  POLYOPS_CHECK_T(low_scalar.get() && high_scalar.get(), BackendError,
                  "polyops.", op, ": aclCreateScalar failed");
  sampling::ScalarPair bounds{low_scalar.get(), high_scalar.get()};
  ExecutorCache clamp, cast, attention;
  struct Context {
    AttentionPhase1 phase1;
    void* context;
    ExecutorCache* cache;
    bool mask;
    // Descriptors in operand order: query, the key and value list
    // elements, [mask], table, out.
    static AclnnStatus Prepare(void* self, AclTensor* const* t,
                               uint64_t* workspace, AclOpExecutor** executor) {
      const auto* c = static_cast<Context*>(self);
      const int m = c->mask ? 1 : 0;
      return c->phase1(c->context, t[0], c->cache->list(0), c->cache->list(1),
                       c->mask ? t[3] : nullptr, t[3 + m], t[4 + m], workspace,
                       executor);
    }
  } bound{phase1, context, &attention, o.mask.has_value()};
  static const auto clamp_launch = Phase2("aclnnClamp", "8.0.RC1");
  static const auto cast_launch = Phase2("aclnnCast", "8.0.RC1");
  const Step clamp_step{&clamp,
                        "aclnnClamp",
                        {Operand::In(table), Operand::Scratch(clamped, 0)},
                        &sampling::PrepareClamp,
                        &bounds,
                        clamp_launch};
  const Step cast_step{
      &cast,
      "aclnnCast",
      {Operand::ScratchIn(clamped, 0), Operand::Scratch(table32, table32_at)},
      &sampling::PrepareCastInt32,
      nullptr,
      cast_launch};
  if (o.mask) {
    RunSteps(op, handle, scratch_bytes,
             {clamp_step,
              cast_step,
              {&attention,
               api,
               {Operand::In(o.query), Operand::ListIn(o.key, 0),
                Operand::ListIn(o.value, 1), Operand::In(*o.mask),
                Operand::ScratchIn(table32, table32_at), Operand::Out(o.out)},
               &Context::Prepare,
               &bound,
               launch}});
  } else {
    RunSteps(op, handle, scratch_bytes,
             {clamp_step,
              cast_step,
              {&attention,
               api,
               {Operand::In(o.query), Operand::ListIn(o.key, 0),
                Operand::ListIn(o.value, 1),
                Operand::ScratchIn(table32, table32_at), Operand::Out(o.out)},
               &Context::Prepare,
               &bound,
               launch}});
  }
}

// FIA V3's phase 1 (the context is the FiaCall plus its host arrays).
struct FiaPhase1Context {
  const FiaCall* call;
  AclIntArray* q_ends;
  AclIntArray* kv_lengths;
};
inline AclnnStatus FiaPhase1(void* context, AclTensor* query,
                             AclTensorList* key, AclTensorList* value,
                             AclTensor* mask, AclTensor* table, AclTensor* out,
                             uint64_t* workspace, AclOpExecutor** executor) {
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
  const auto* c = static_cast<FiaPhase1Context*>(context);
  const FiaCall& call = *c->call;
  char layout[] = "TND";
  return get(query, key, value, /*pse_shift=*/nullptr, mask, c->q_ends,
             c->kv_lengths, nullptr, nullptr, nullptr, nullptr, nullptr,
             nullptr, nullptr, table, nullptr, nullptr, nullptr, nullptr,
             nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
             nullptr, call.num_heads, call.scale, call.pre_tokens,
             call.next_tokens, layout, call.num_kv_heads,
             static_cast<int64_t>(call.sparse_mode), kFiaInnerPrecise,
             call.block_size, /*antiquant_mode=*/0, /*softmax_lse_flag=*/false,
             /*key_antiquant_mode=*/0, /*value_antiquant_mode=*/0, out,
             /*softmax_lse=*/nullptr, workspace, executor);
}

// Runs one FIA V3 call on handle.stream (RunPagedApi).
inline void RunFusedInferAttention(const char* op, const Handle& handle,
                                   const FiaCall& call) {
  static const auto launch = Phase2(kFiaApi, kFiaSince);
  AttentionOperands operands{call.query,   call.key,         call.value,
                             std::nullopt, call.block_table, call.out};
  if (call.sparse_mode != FiaSparseMode::kNone) {
    // Made once per process and device, never per call.
    const void* data =
        ProcessConstant("fia_causal_mask", handle.device.index,
                        kFiaMaskSize * kFiaMaskSize, &FillCausalMask);
    const int64_t shape[2] = {kFiaMaskSize, kFiaMaskSize};
    const int64_t strides[2] = {kFiaMaskSize, 1};
    operands.mask = Tensor::FromParts(const_cast<void*>(data), 2, shape,
                                      strides, DataType::kBool, handle.device);
  }
  // Owns the host arrays until the launch is queued.
  OneShotCall arrays(op);
  FiaPhase1Context context{&call, arrays.IntArray(call.q_ends),
                           arrays.IntArray(call.kv_lengths)};
  RunPagedApi(op, kFiaApi, handle, operands, &FiaPhase1, &context, launch);
}

}  // namespace polyops::ascend

#endif  // POLYOPS_ASCEND_KERNELS_ATTENTION_ATTENTION_H_
