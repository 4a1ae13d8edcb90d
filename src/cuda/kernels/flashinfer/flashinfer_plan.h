// The FlashInfer attention slots' host side (docs/backends/cuda_attention.md,
// "flashinfer"): the work plan computed from host copies of the sequence
// lengths, its upload, and the launchers of FlashInfer's FA2 prefill
// templates. FlashInfer's own headers are included only by the launchers'
// instantiation TUs (cuda/kernels/flashinfer/flashinfer_kernels.cuh, generated
// by cmake/flashinfer.cmake), so the slots' TUs stay cheap to compile.
#ifndef POLYOPS_CUDA_KERNELS_FLASHINFER_FLASHINFER_PLAN_H_
#define POLYOPS_CUDA_KERNELS_FLASHINFER_FLASHINFER_PLAN_H_

#ifdef POLYOPS_WITH_FLASHINFER

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/data_type.h"
#include "core/handle.h"

namespace polyops::cuda::flashinfer {

// The CTA query tiles compiled per (dtype, head size): FlashInfer's planner
// picks 16, 64 or 128; two keep the instantiation count down. kSmallTile
// serves decode (at most 16 packed query rows per sequence on average),
// LargeTile the rest.
inline constexpr int kSmallTile = 16;
constexpr int LargeTile(int head_dim) { return head_dim < 256 ? 128 : 64; }

// One call's device pointers and sizes for a launcher; Execute fills the
// plan's pointers.
struct LaunchArgs {
  const void* q = nullptr;
  int64_t q_stride_n = 0, q_stride_h = 0;
  const void* k = nullptr;
  const void* v = nullptr;
  // Contiguous (ragged) kv: token and head strides of k and v.
  int64_t k_stride_n = 0, k_stride_h = 0, v_stride_n = 0, v_stride_h = 0;
  // Paged kv ([num_blocks, page_size, Hkv, D], k and v share strides).
  int64_t page_stride = 0, page_stride_n = 0, page_stride_h = 0;
  int page_size = 0;
  void* o = nullptr;  // [Tq, Hq, D], contiguous
  int batch = 0;
  int num_qo_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  float sm_scale = 1.0f;
  int32_t window_left = -1;
  // Plan (device).
  int32_t* q_indptr = nullptr;
  int32_t* kv_indptr = nullptr;   // ragged: tokens; paged: pages
  int32_t* kv_indices = nullptr;  // paged: the pages, sequence by sequence
  int32_t* last_page_len = nullptr;
  int32_t* request_indices = nullptr;
  int32_t* qo_tile_indices = nullptr;
  int32_t* kv_tile_indices = nullptr;
  int32_t* o_indptr = nullptr;
  int32_t* merge_indptr = nullptr;
  int32_t* kv_chunk_size = nullptr;
  uint32_t padded_batch_size = 0;
  uint32_t total_rows = 0;
  void* tmp_v = nullptr;  // null: kv not split
  float* tmp_s = nullptr;
};

// Launchers, one explicit instantiation per (dtype, head size, mask, tile)
// in the generated TUs. NT is __half or __nv_bfloat16. Throw BackendError
// (naming `op`) when FlashInfer or CUDA reports a failure.
template <typename NT, int kHeadDim, bool kCausal, int kCtaTileQ>
void RunRagged(const LaunchArgs& args, cudaStream_t stream, const char* op);
template <typename NT, int kHeadDim, bool kCausal, int kCtaTileQ>
void RunPaged(const LaunchArgs& args, cudaStream_t stream, const char* op);

// Calls fn(NT{}, std::integral_constant<int, D>{}) when the build compiled
// launchers for (dtype, head_dim) (cmake: POLYOPS_FLASHINFER_DTYPES,
// POLYOPS_FLASHINFER_HEAD_DIMS); returns whether it did.
template <typename Fn>
bool DispatchCompiled(DataType dtype, int64_t head_dim, Fn&& fn) {
  bool done = false;
  auto visit = [&](auto type_tag, auto dim_tag) {
    using NT = decltype(type_tag);
    if (done || head_dim != decltype(dim_tag)::value) return;
    const DataType want =
        std::is_same_v<NT, __half> ? DataType::kFloat16 : DataType::kBFloat16;
    if (dtype != want) return;
    fn(type_tag, dim_tag);
    done = true;
  };
  (void)visit;
#ifdef POLYOPS_FLASHINFER_FLOAT16_64
  visit(__half{}, std::integral_constant<int, 64>{});
#endif
#ifdef POLYOPS_FLASHINFER_FLOAT16_128
  visit(__half{}, std::integral_constant<int, 128>{});
#endif
#ifdef POLYOPS_FLASHINFER_FLOAT16_256
  visit(__half{}, std::integral_constant<int, 256>{});
#endif
#ifdef POLYOPS_FLASHINFER_BFLOAT16_64
  visit(__nv_bfloat16{}, std::integral_constant<int, 64>{});
#endif
#ifdef POLYOPS_FLASHINFER_BFLOAT16_128
  visit(__nv_bfloat16{}, std::integral_constant<int, 128>{});
#endif
#ifdef POLYOPS_FLASHINFER_BFLOAT16_256
  visit(__nv_bfloat16{}, std::integral_constant<int, 256>{});
#endif
  return done;
}

// The compiled (dtype, head size) pairs, e.g. "bfloat16 x {64, 128}", for
// NotImplementedError messages.
const char* CompiledSet();

// What the planner needs; lengths come from host memory.
struct PlanInput {
  int batch = 0;
  const int32_t* q_indptr = nullptr;  // host, [batch + 1], checked
  // Host kv lengths: either an indptr [batch + 1] (flash_attention) or
  // per-sequence lengths [batch] (paged_attention).
  const int32_t* kv_indptr = nullptr;
  const int32_t* kv_lens = nullptr;
  int num_qo_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int page_size = 0;  // 0: contiguous kv
  int32_t window_left = -1;
  bool causal = false;
  size_t out_elem_bytes = 2;
};

// A planned call: the int32 image of every index array (uploaded as is),
// the offsets into it, and the split-kv scratch sizes.
struct Plan {
  std::vector<int32_t> words;
  size_t q_indptr = 0, kv_indptr = 0, last_page_len = 0, request_indices = 0,
         qo_tile_indices = 0, kv_tile_indices = 0, o_indptr = 0,
         merge_indptr = 0, kv_chunk_size = 0;
  size_t num_pages = 0;  // paged: entries of kv_indices (filled on device)
  int cta_tile_q = kSmallTile;
  bool split_kv = false;
  uint32_t padded_batch_size = 0;
  uint32_t total_rows = 0;
  size_t tmp_v_bytes = 0;
  size_t tmp_s_bytes = 0;
};

// Host only: FlashInfer's FA2 schedule (scheduler.cuh, PrefillPlan), own
// code: CTA tile from the average packed query length, kv split into chunks
// only when the tiles alone would leave the GPU (2 CTAs per SM) idle, no
// left window is set and every query row sees a key. The caller has checked
// the lengths (non-negative, within the kv tensor or table). num_sms: the
// device's multiprocessor count.
Plan MakePlan(const PlanInput& input, int num_sms);

// The current device's multiprocessor count (MakePlan's num_sms).
int MultiprocessorCount(const char* op);

// The device block table of a paged call.
struct PagedTable {
  const void* table = nullptr;  // device [batch, max_blocks]
  bool wide = false;            // int64 ids (else int32)
  int64_t stride = 0;
  int64_t num_blocks = 0;
};

using Launcher = void (*)(const LaunchArgs&, cudaStream_t, const char*);

// Runs one planned call on `handle`'s stream: takes scratch from
// cuda::Workspace, uploads the plan through kernel arguments (no pinned
// buffer, no host synchronization: the values are captured at launch, so the
// host vector may die at once), gathers the pages of a paged call from the
// device block table, then runs `small` or `large` (the launcher compiled
// for plan.cta_tile_q). A block id outside [0, num_blocks) cannot raise
// ValueError without a device-to-host copy: page 0 is read in its place and
// that sequence's output rows become NaN, as in the flash slot.
// nan_bits: the output dtype's quiet NaN (0x7E00 float16, 0x7FC0 bfloat16).
void Execute(const Handle& handle, const Plan& plan, LaunchArgs args,
             const PagedTable* paged, Launcher small, Launcher large,
             uint16_t nan_bits, const char* op);

}  // namespace polyops::cuda::flashinfer

#endif  // POLYOPS_WITH_FLASHINFER

#endif  // POLYOPS_CUDA_KERNELS_FLASHINFER_FLASHINFER_PLAN_H_
