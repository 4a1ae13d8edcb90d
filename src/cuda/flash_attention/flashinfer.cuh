#ifndef POLYOPS_CUDA_FLASH_ATTENTION_FLASHINFER_CUH_
#define POLYOPS_CUDA_FLASH_ATTENTION_FLASHINFER_CUH_

#ifdef POLYOPS_WITH_FLASHINFER

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "base/flash_attention.h"
#include "core/operator.h"
#include "cuda/kernels/flashinfer/flashinfer_checks.h"
#include "cuda/kernels/flashinfer/flashinfer_plan.h"
#include "cuda/runtime/common.cuh"

namespace polyops {

// Slot 1: FlashInfer's FA2 batch prefill kernels (tensor cores; ragged kv,
// or paged kv through the block table), the default where it applies
// (docs/backends/cuda_attention.md, "flashinfer"). The work schedule is planned
// on the host from cu_seqlens_q_host / cu_seqlens_kv_host, whose values decide
// the lengths (the device copies are not read), and uploaded through kernel
// arguments: no host synchronization, no allocation outside
// cuda::Workspace. Outside its envelope the constructor raises
// NotImplemented and the default selection runs slot 0 ("flash"): float32,
// a (dtype, head size) pair this build did not compile, no host lengths,
// window_right > 0 without causal, a strided out, strides that are not
// multiples of 8 elements or key and value caches with different strides.
// Semantics differ from the contract in two documented ways: the softmax
// weights are rounded to the input dtype before multiplying V (FA2 on
// tensor cores), and FlashInfer's masking sentinel is -5e4 (scores are not
// IEEE-exact for NaN/inf inputs). Compiled, never executed on a GPU when
// written.
template <>
class Operator<FlashAttention, Device::Type::kCuda, 1> : public FlashAttention {
 public:
  static constexpr const char* kImplementationName = "flashinfer";

  explicit Operator(const Args& args) : FlashAttention(args) {
    namespace fi = cuda::flashinfer;
    fi::CheckCompiled(kName, dtype_, head_size_);
    if (!args.cu_seqlens_q_host.has_value() ||
        !args.cu_seqlens_kv_host.has_value()) {
      fi::Refuse(kName,
                 "calls without cu_seqlens_q_host and cu_seqlens_kv_host "
                 "because its schedule is planned on the host, and reading "
                 "the device cu_seqlens would need a blocking device-to-host "
                 "copy");
    }
    // FlashInfer bounds keys on the right at the diagonal (causal) or not
    // at all; with causal set, window_right >= 0 changes nothing.
    if (!causal_ && window_right_ > 0) {
      fi::Refuse(kName, "window_right = ", window_right_,
                 " without causal because FlashInfer's masks bound keys on "
                 "the right only at the diagonal (window_right 0) or not at "
                 "all (-1)");
    }
    causal_mask_ = causal_ || window_right_ == 0;
    // A window wider than any int32 sequence is no window.
    window_left_i32_ = window_left_ > std::numeric_limits<int32_t>::max()
                           ? -1
                           : static_cast<int32_t>(window_left_);
    fi::CheckContiguousOut(kName, *args.out);
    fi::CheckOperand(kName, "query", args.query);
    if (paged_) {
      fi::CheckCaches(kName, args.key, args.value);
      fi::CheckPageIds(kName, *args.block_table, num_blocks_);
      if (block_size_ > std::numeric_limits<int32_t>::max() ||
          max_blocks_ * block_size_ > std::numeric_limits<int32_t>::max()) {
        fi::Refuse(kName, "block size ", block_size_, " with ", max_blocks_,
                   " blocks per sequence because FlashInfer counts tokens in "
                   "32 bits");
      }
    } else {
      fi::CheckOperand(kName, "key", args.key);
      fi::CheckOperand(kName, "value", args.value);
      // int32 cu_seqlens_kv cannot end past INT32_MAX; int64 ones can (a
      // stride-0 key passes CheckOperand), and the planner's are int32.
      if (args.cu_seqlens_kv.dtype() == DataType::kInt64 &&
          num_tokens_kv_ > fi::kMaxOffset) {
        fi::Refuse(kName, num_tokens_kv_,
                   " kv tokens because FlashInfer counts tokens in 32 bits");
      }
    }
    fi::DispatchCompiled(dtype_, head_size_, [&](auto type_tag, auto dim_tag) {
      using NT = decltype(type_tag);
      constexpr int kDim = decltype(dim_tag)::value;
      constexpr int kLarge = fi::LargeTile(kDim);
      if (paged_) {
        small_ = causal_mask_ ? &fi::RunPaged<NT, kDim, true, fi::kSmallTile>
                              : &fi::RunPaged<NT, kDim, false, fi::kSmallTile>;
        large_ = causal_mask_ ? &fi::RunPaged<NT, kDim, true, kLarge>
                              : &fi::RunPaged<NT, kDim, false, kLarge>;
      } else {
        small_ = causal_mask_ ? &fi::RunRagged<NT, kDim, true, fi::kSmallTile>
                              : &fi::RunRagged<NT, kDim, false, fi::kSmallTile>;
        large_ = causal_mask_ ? &fi::RunRagged<NT, kDim, true, kLarge>
                              : &fi::RunRagged<NT, kDim, false, kLarge>;
      }
    });
  }

  void operator()(const Handle& handle, const Args& args) const override {
    namespace fi = cuda::flashinfer;
    if (num_tokens_q_ == 0 || batch_ == 0) return;
    const std::vector<int64_t> cu_q =
        WidenIndices(args.cu_seqlens_q_host->data(),
                     args.cu_seqlens_q_host->dtype(), batch_ + 1);
    const std::vector<int64_t> cu_kv =
        WidenIndices(args.cu_seqlens_kv_host->data(),
                     args.cu_seqlens_kv_host->dtype(), batch_ + 1);
    CheckCuSeqlens(cu_q.data(), cu_kv.data(), batch_, num_tokens_q_,
                   num_tokens_kv_);
    // The planner's int32 copies are exact: the q offsets lie in [0, Tq]
    // and unpaged kv offsets in [0, Tkv] (checked), paged kv lengths in [0,
    // capacity] (below), and the constructor refused Tq, Tkv and capacities
    // above INT32_MAX. Paged calls pass lengths, since their offsets only
    // give lengths and may themselves pass INT32_MAX.
    const std::vector<int32_t> q_indptr(cu_q.begin(), cu_q.end());
    std::vector<int32_t> kv;  // unpaged: offsets [B + 1]; paged: lengths [B]
    if (paged_) {
      const int64_t capacity = max_blocks_ * block_size_;
      for (int64_t b = 0; b < batch_; ++b) {
        const int64_t kv_len = cu_kv[b + 1] - cu_kv[b];
        POLYOPS_CHECK(kv_len <= capacity, "polyops.", kName, ": sequence ", b,
                      " has ", kv_len,
                      " kv tokens (cu_seqlens_kv_host), more than its "
                      "block_table row holds (",
                      max_blocks_, " blocks of ", block_size_, ")");
        kv.push_back(static_cast<int32_t>(kv_len));
      }
    } else {
      kv.assign(cu_kv.begin(), cu_kv.end());
    }
    fi::CheckAligned(kName, "query", args.query.data());
    fi::CheckAligned(kName, "key", args.key.data());
    fi::CheckAligned(kName, "value", args.value.data());
    fi::CheckAligned(kName, "out", args.out->data());

    fi::PlanInput input;
    input.batch = static_cast<int>(batch_);
    input.q_indptr = q_indptr.data();
    if (paged_) {
      input.kv_lens = kv.data();
    } else {
      input.kv_indptr = kv.data();
    }
    input.num_qo_heads = static_cast<int>(num_heads_);
    input.num_kv_heads = static_cast<int>(num_kv_heads_);
    input.head_dim = static_cast<int>(head_size_);
    input.page_size = paged_ ? static_cast<int>(block_size_) : 0;
    input.window_left = window_left_i32_;
    input.causal = causal_mask_;
    const fi::Plan plan = fi::MakePlan(input, fi::MultiprocessorCount(kName));

    fi::LaunchArgs launch;
    launch.q = args.query.data();
    launch.q_stride_n = args.query.stride(0);
    launch.q_stride_h = args.query.stride(1);
    launch.k = args.key.data();
    launch.v = args.value.data();
    if (paged_) {
      launch.page_stride = args.key.stride(0);
      launch.page_stride_n = args.key.stride(1);
      launch.page_stride_h = args.key.stride(2);
      launch.page_size = static_cast<int>(block_size_);
    } else {
      launch.k_stride_n = args.key.stride(0);
      launch.k_stride_h = args.key.stride(1);
      launch.v_stride_n = args.value.stride(0);
      launch.v_stride_h = args.value.stride(1);
    }
    launch.o = args.out->data();
    launch.batch = input.batch;
    launch.num_qo_heads = input.num_qo_heads;
    launch.num_kv_heads = input.num_kv_heads;
    launch.head_dim = input.head_dim;
    launch.sm_scale = scale_;
    launch.window_left = window_left_i32_;
    fi::PagedTable table;
    if (paged_) {
      table.table = args.block_table->data();
      table.wide = args.block_table->dtype() == DataType::kInt64;
      table.stride = args.block_table->stride(0);
      table.num_blocks = num_blocks_;
    }
    fi::Execute(handle, plan, launch, paged_ ? &table : nullptr, small_, large_,
                fi::NanBits(dtype_), kName);
  }

 private:
  bool causal_mask_ = true;
  int32_t window_left_i32_ = -1;
  cuda::flashinfer::Launcher small_ = nullptr;
  cuda::flashinfer::Launcher large_ = nullptr;
};

}  // namespace polyops

#endif  // POLYOPS_WITH_FLASHINFER

#endif  // POLYOPS_CUDA_FLASH_ATTENTION_FLASHINFER_CUH_
