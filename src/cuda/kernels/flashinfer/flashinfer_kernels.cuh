// The launchers declared in cuda/kernels/flashinfer/flashinfer_plan.h, written
// over FlashInfer's FA2 prefill templates (flashinfer/attention/prefill.cuh,
// 0.5.3). Included only by the instantiation TUs that cmake/flashinfer.cmake
// generates, one per (dtype, head size, kv kind): each FlashInfer instantiation
// costs 12-17 s of nvcc per architecture, so they are spread over TUs that
// build in parallel and are left out of the slots' own TUs.
#ifndef POLYOPS_CUDA_KERNELS_FLASHINFER_FLASHINFER_KERNELS_CUH_
#define POLYOPS_CUDA_KERNELS_FLASHINFER_FLASHINFER_KERNELS_CUH_

#include <cuda_runtime.h>

#include <exception>
#include <flashinfer/attention/default_prefill_params.cuh>
#include <flashinfer/attention/mask.cuh>
#include <flashinfer/attention/prefill.cuh>
#include <flashinfer/attention/variants.cuh>
#include <flashinfer/page.cuh>
#include <flashinfer/pos_enc.cuh>

#include "core/error.h"
#include "cuda/kernels/flashinfer/flashinfer_plan.h"
#include "cuda/runtime/common.cuh"

namespace polyops::cuda::flashinfer {

// Plain softmax attention plus the left window (use_sliding_window): with
// window_left = -1 FlashInfer widens the window to the whole sequence, so
// one variant serves windowed and unwindowed calls. No custom mask, no soft
// cap, no ALiBi: the op contract has none of them.
using Variant = ::flashinfer::DefaultAttention<false, true, false, false>;

// FlashInfer reports failures as cudaError_t or by throwing
// flashinfer::Error (a std::exception): both become BackendError.
template <typename Fn>
void Guarded(const char* op, const char* what, Fn&& fn) {
  cudaError_t status;
  try {
    status = fn();
  } catch (const std::exception& error) {
    throw BackendError(::polyops::detail::Concat(
        "polyops.", op, ": FlashInfer ", what, " failed: ", error.what()));
  }
  Check(status, op, what);
}

// Fields common to both params structs: the plan's arrays and scalars.
template <typename Params>
void FillSchedule(const LaunchArgs& a, Params* p) {
  p->q_stride_n = static_cast<decltype(p->q_stride_n)>(a.q_stride_n);
  p->q_stride_h = static_cast<decltype(p->q_stride_h)>(a.q_stride_h);
  p->num_qo_heads = static_cast<uint32_t>(a.num_qo_heads);
  p->group_size = ::flashinfer::uint_fastdiv(
      static_cast<uint32_t>(a.num_qo_heads / a.num_kv_heads));
  p->window_left = a.window_left;
  p->logits_soft_cap = 0.0f;
  p->sm_scale = a.sm_scale;
  p->rope_rcp_scale = 1.0f;
  p->rope_rcp_theta = 1.0f;
  p->q_indptr = a.q_indptr;
  p->request_indices = a.request_indices;
  p->qo_tile_indices = a.qo_tile_indices;
  p->kv_tile_indices = a.kv_tile_indices;
  p->o_indptr = a.o_indptr;
  p->merge_indptr = a.merge_indptr;
  p->kv_chunk_size_ptr = a.kv_chunk_size;
  p->block_valid_mask = nullptr;  // only for CUDA-graph padding
  p->max_total_num_rows = a.total_rows;
  p->total_num_rows = nullptr;
  p->padded_batch_size = a.padded_batch_size;
  p->partition_kv = a.tmp_v != nullptr;
}

template <typename NT, int kHeadDim, bool kCausal, int kCtaTileQ>
void RunRagged(const LaunchArgs& a, cudaStream_t stream, const char* op) {
  using Params = ::flashinfer::BatchPrefillRaggedParams<NT, NT, NT, int32_t>;
  Params p;
  p.q = static_cast<NT*>(const_cast<void*>(a.q));
  p.k = static_cast<NT*>(const_cast<void*>(a.k));
  p.v = static_cast<NT*>(const_cast<void*>(a.v));
  p.o = static_cast<NT*>(a.o);
  p.lse = nullptr;
  p.kv_indptr = a.kv_indptr;
  p.num_kv_heads = static_cast<uint32_t>(a.num_kv_heads);
  p.k_stride_n = static_cast<uint32_t>(a.k_stride_n);
  p.k_stride_h = static_cast<uint32_t>(a.k_stride_h);
  p.v_stride_n = static_cast<uint32_t>(a.v_stride_n);
  p.v_stride_h = static_cast<uint32_t>(a.v_stride_h);
  FillSchedule(a, &p);
  constexpr auto kMask =
      kCausal ? ::flashinfer::MaskMode::kCausal : ::flashinfer::MaskMode::kNone;
  Guarded(op, "BatchPrefillWithRaggedKVCache", [&] {
    return ::flashinfer::BatchPrefillWithRaggedKVCacheDispatched<
        kCtaTileQ, kHeadDim, kHeadDim, ::flashinfer::PosEncodingMode::kNone,
        /*USE_FP16_QK_REDUCTION=*/false, kMask, Variant, Params>(
        p, static_cast<NT*>(a.tmp_v), a.tmp_s, /*enable_pdl=*/false, stream);
  });
}

template <typename NT, int kHeadDim, bool kCausal, int kCtaTileQ>
void RunPaged(const LaunchArgs& a, cudaStream_t stream, const char* op) {
  using Params = ::flashinfer::BatchPrefillPagedParams<NT, NT, NT, int32_t>;
  Params p;
  p.q = static_cast<NT*>(const_cast<void*>(a.q));
  // [page, token in page, head] strides: FlashInfer's NHD order.
  const int64_t strides[3] = {a.page_stride, a.page_stride_n, a.page_stride_h};
  p.paged_kv = ::flashinfer::paged_kv_t<NT, int32_t>(
      static_cast<uint32_t>(a.num_kv_heads), static_cast<uint32_t>(a.page_size),
      static_cast<uint32_t>(kHeadDim), static_cast<uint32_t>(a.batch),
      ::flashinfer::QKVLayout::kNHD, static_cast<NT*>(const_cast<void*>(a.k)),
      static_cast<NT*>(const_cast<void*>(a.v)), strides, a.kv_indices,
      a.kv_indptr, a.last_page_len);
  p.o = static_cast<NT*>(a.o);
  p.lse = nullptr;
  FillSchedule(a, &p);
  constexpr auto kMask =
      kCausal ? ::flashinfer::MaskMode::kCausal : ::flashinfer::MaskMode::kNone;
  Guarded(op, "BatchPrefillWithPagedKVCache", [&] {
    return ::flashinfer::BatchPrefillWithPagedKVCacheDispatched<
        kCtaTileQ, kHeadDim, kHeadDim, ::flashinfer::PosEncodingMode::kNone,
        /*USE_FP16_QK_REDUCTION=*/false, kMask, Variant, Params>(
        p, static_cast<NT*>(a.tmp_v), a.tmp_s, /*enable_pdl=*/false, stream);
  });
}

}  // namespace polyops::cuda::flashinfer

// Explicit instantiations for one (dtype, head size) and kv kind (Ragged or
// Paged): both masks times both CTA tiles.
#define POLYOPS_FLASHINFER_INSTANTIATE(KIND, NT, D)                            \
  namespace polyops::cuda::flashinfer {                                        \
  template void Run##KIND<NT, D, false, kSmallTile>(const LaunchArgs&,         \
                                                    cudaStream_t,              \
                                                    const char*);              \
  template void Run##KIND<NT, D, true, kSmallTile>(const LaunchArgs&,          \
                                                   cudaStream_t, const char*); \
  template void Run##KIND<NT, D, false, LargeTile(D)>(const LaunchArgs&,       \
                                                      cudaStream_t,            \
                                                      const char*);            \
  template void Run##KIND<NT, D, true, LargeTile(D)>(const LaunchArgs&,        \
                                                     cudaStream_t,             \
                                                     const char*);             \
  }

#endif  // POLYOPS_CUDA_KERNELS_FLASHINFER_FLASHINFER_KERNELS_CUH_
