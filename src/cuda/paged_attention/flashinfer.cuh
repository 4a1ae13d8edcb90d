#ifndef POLYOPS_CUDA_PAGED_ATTENTION_FLASHINFER_CUH_
#define POLYOPS_CUDA_PAGED_ATTENTION_FLASHINFER_CUH_

#ifdef POLYOPS_WITH_FLASHINFER

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "base/paged_attention.h"
#include "core/operator.h"
#include "cuda/kernels/flashinfer/flashinfer_checks.h"
#include "cuda/kernels/flashinfer/flashinfer_plan.h"
#include "cuda/runtime/common.cuh"

namespace polyops {

// Slot 1: decode through FlashInfer's FA2 paged prefill kernel with one
// query token per sequence (what FlashInfer's Python API calls decode with
// use_tensor_cores=True: the GQA group's query heads fill the tile rows, so
// Hq / Hkv = 4 makes 4 useful rows instead of 1), the default where it
// applies (docs/backends/cuda_attention.md, "flashinfer"). Sharing the prefill
// instantiations with flash_attention's slot 1 costs no extra compile time.
// The schedule is planned on the host from seq_lens_host (whose values
// decide the lengths; block_table_host is accepted and not needed: the pages
// are gathered from the device block table). Outside its envelope the
// constructor raises NotImplemented and the default selection runs slot 0
// ("flash"): float32, a (dtype, head size) pair this build did not compile,
// no seq_lens_host, a strided out, cache strides that are not multiples of
// 8 elements or key and value caches with different strides. Deviations as
// flash_attention's slot 1 (bf16/fp16 softmax weights, -5e4 mask sentinel).
// Compiled, never executed on a GPU when written.
template <>
class Operator<PagedAttention, Device::Type::kCuda, 1> : public PagedAttention {
 public:
  static constexpr const char* kImplementationName = "flashinfer";

  explicit Operator(const Args& args) : PagedAttention(args) {
    namespace fi = cuda::flashinfer;
    fi::CheckCompiled(kName, dtype_, head_size_);
    if (!args.seq_lens_host.has_value()) {
      fi::Refuse(kName,
                 "calls without seq_lens_host because its schedule is "
                 "planned on the host, and reading the device seq_lens would "
                 "need a blocking device-to-host copy");
    }
    fi::CheckContiguousOut(kName, *args.out);
    fi::CheckOperand(kName, "query", args.query);
    fi::CheckCaches(kName, args.key_cache, args.value_cache);
    fi::CheckPageIds(kName, args.block_table, num_blocks_);
    if (block_size_ > std::numeric_limits<int32_t>::max() ||
        max_blocks_ * block_size_ > std::numeric_limits<int32_t>::max()) {
      fi::Refuse(kName, "block size ", block_size_, " with ", max_blocks_,
                 " blocks per sequence because FlashInfer counts tokens in "
                 "32 bits");
    }
    fi::DispatchCompiled(dtype_, head_size_, [&](auto type_tag, auto dim_tag) {
      using NT = decltype(type_tag);
      constexpr int kDim = decltype(dim_tag)::value;
      // One query token per sequence: no mask applies.
      small_ = &fi::RunPaged<NT, kDim, false, fi::kSmallTile>;
      large_ = &fi::RunPaged<NT, kDim, false, fi::LargeTile(kDim)>;
    });
    q_indptr_.resize(static_cast<size_t>(batch_) + 1);
    for (int64_t b = 0; b <= batch_; ++b) {
      q_indptr_[b] = static_cast<int32_t>(b);
    }
  }

  void operator()(const Handle& handle, const Args& args) const override {
    namespace fi = cuda::flashinfer;
    if (batch_ == 0) return;
    const std::vector<int64_t> wide = WidenIndices(
        args.seq_lens_host->data(), args.seq_lens_host->dtype(), batch_);
    const int64_t capacity = max_blocks_ * block_size_;
    for (int64_t b = 0; b < batch_; ++b) {
      POLYOPS_CHECK(wide[b] >= 0 && wide[b] <= capacity, "polyops.", kName,
                    ": seq_lens_host[", b, "] = ", wide[b],
                    " must be in [0, max_blocks * block_size = ", capacity,
                    "]");
    }
    // Exact: capacity <= INT32_MAX (the constructor refused more).
    const std::vector<int32_t> lens(wide.begin(), wide.end());
    fi::CheckAligned(kName, "query", args.query.data());
    fi::CheckAligned(kName, "key_cache", args.key_cache.data());
    fi::CheckAligned(kName, "value_cache", args.value_cache.data());
    fi::CheckAligned(kName, "out", args.out->data());

    fi::PlanInput input;
    input.batch = static_cast<int>(batch_);
    input.q_indptr = q_indptr_.data();
    input.kv_lens = lens.data();
    input.num_qo_heads = static_cast<int>(num_heads_);
    input.num_kv_heads = static_cast<int>(num_kv_heads_);
    input.head_dim = static_cast<int>(head_size_);
    input.page_size = static_cast<int>(block_size_);
    const fi::Plan plan = fi::MakePlan(input, fi::MultiprocessorCount(kName));

    fi::LaunchArgs launch;
    launch.q = args.query.data();
    launch.q_stride_n = args.query.stride(0);
    launch.q_stride_h = args.query.stride(1);
    launch.k = args.key_cache.data();
    launch.v = args.value_cache.data();
    launch.page_stride = args.key_cache.stride(0);
    launch.page_stride_n = args.key_cache.stride(1);
    launch.page_stride_h = args.key_cache.stride(2);
    launch.page_size = input.page_size;
    launch.o = args.out->data();
    launch.batch = input.batch;
    launch.num_qo_heads = input.num_qo_heads;
    launch.num_kv_heads = input.num_kv_heads;
    launch.head_dim = input.head_dim;
    launch.sm_scale = scale_;
    fi::PagedTable table;
    table.table = args.block_table.data();
    table.wide = args.block_table.dtype() == DataType::kInt64;
    table.stride = args.block_table.stride(0);
    table.num_blocks = num_blocks_;
    fi::Execute(handle, plan, launch, &table, small_, large_,
                fi::NanBits(dtype_), kName);
  }

 private:
  std::vector<int32_t> q_indptr_;  // 0, 1, ..., B: one query row each
  cuda::flashinfer::Launcher small_ = nullptr;
  cuda::flashinfer::Launcher large_ = nullptr;
};

}  // namespace polyops

#endif  // POLYOPS_WITH_FLASHINFER

#endif  // POLYOPS_CUDA_PAGED_ATTENTION_FLASHINFER_CUH_
