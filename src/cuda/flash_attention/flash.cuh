#ifndef POLYOPS_CUDA_FLASH_ATTENTION_FLASH_CUH_
#define POLYOPS_CUDA_FLASH_ATTENTION_FLASH_CUH_

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>

#include "base/flash_attention.h"
#include "core/dispatch.h"
#include "core/operator.h"
#include "cuda/kernels/attention/attention.cuh"
#include "cuda/runtime/common.cuh"

namespace polyops::cuda {

struct FlashAttentionParams {
  const void* query;
  int64_t q_stride_token, q_stride_head;
  void* out;
  int64_t o_stride_token, o_stride_head;
  KvOperand key, value;
  IndexArray cu_q;
  IndexArray cu_kv;
  IndexArray table;  // data null: contiguous kv
  int64_t table_stride;
  int64_t max_blocks;
  int block_size;  // 0: contiguous kv
  int64_t num_blocks;
  int batch;
  int64_t total_q;
  int64_t total_kv;  // contiguous kv only
  int head_size;
  int group;             // query heads per kv head
  int heads_per_block;   // min(group, kAttentionRows)
  int head_chunks;       // ceil(group / heads_per_block)
  int tokens_per_block;  // kAttentionRows / heads_per_block
  float scale;
  bool causal;
  int64_t window_left, window_right;
};

// Grid (ceil(Tq / tokens_per_block), Hkv * head_chunks). Block (x, y) holds
// the packed query tokens [x * tokens_per_block, +tokens_per_block) times up
// to heads_per_block query heads of one kv head (tile row r: token r /
// heads, head r % heads), so every staged key and value serves all the
// query heads of its group (GQA) and decode-like batches (one token per
// sequence) still fill the tile. The tokens may belong to several
// sequences: each sequence met is a segment run on its own. The grid is
// sized from Tq alone (no device-to-host copy of cu_seqlens).
// cu_seqlens and the block table are read on the device and cannot raise
// ValueError without a host synchronization: a sequence whose kv range does
// not fit the kv tensor or the table gets NaN rows, a block id outside the
// cache reads as NaN keys, and nothing is read out of bounds.
template <typename NT, int kDims>
__global__ void __launch_bounds__(kAttentionThreads)
    FlashAttentionKernel(FlashAttentionParams p) {
  extern __shared__ float shared[];
  __shared__ int ranges[2 * kAttentionRows];
  const StagedTile tile = CarveTile(shared, p.head_size, ranges);
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int64_t kv_head = blockIdx.y / p.head_chunks;
  const int chunk = blockIdx.y % p.head_chunks;
  const int64_t head_begin =
      kv_head * p.group + static_cast<int64_t>(chunk) * p.heads_per_block;
  const int heads = min(p.heads_per_block, p.group - chunk * p.heads_per_block);
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * p.tokens_per_block;
  const int64_t t1 = min(t0 + p.tokens_per_block, p.total_q);
  const NT* query = static_cast<const NT*>(p.query);
  NT* out = static_cast<NT*>(p.out);

  // The sequence of token t0: the last b with cu_q[b] <= t0 (upper bound).
  int first = 0;
  int count = p.batch + 1;
  while (count > 0) {
    const int step = count / 2;
    if (p.cu_q[first + step] <= t0) {
      first += step + 1;
      count -= step + 1;
    } else {
      count = step;
    }
  }
  // Every thread reads the same values: the loop is block-uniform.
  for (int b = max(first - 1, 0); b < p.batch; ++b) {
    const int64_t q_begin = p.cu_q[b];
    const int64_t q_end = p.cu_q[b + 1];
    if (q_begin >= t1) break;
    const int64_t seg_begin = max(t0, q_begin);
    const int64_t seg_end = min(t1, q_end);
    if (seg_begin >= seg_end) continue;
    const int rows = static_cast<int>(seg_end - seg_begin) * heads;
    const int64_t q_len = q_end - q_begin;
    const int64_t kv_start = p.cu_kv[b];
    const int64_t kv_len = p.cu_kv[b + 1] - kv_start;
    bool valid = kv_len >= 0;
    if (p.block_size > 0) {
      valid = valid && kv_len <= p.max_blocks * p.block_size;
    } else {
      valid = valid && kv_start >= 0 && kv_start + kv_len <= p.total_kv;
    }
    if (!valid) {
      for (int r = warp; r < rows; r += kAttentionWarps) {
        NT* o = out + (seg_begin + r / heads) * p.o_stride_token +
                (head_begin + r % heads) * p.o_stride_head;
        for (int d = lane; d < p.head_size; d += 32) o[d] = FromFloat<NT>(NAN);
      }
      continue;
    }

    __syncthreads();  // the previous segment may still read the tile
    for (int r = warp; r < kAttentionRows; r += kAttentionWarps) {
      const NT* q = r < rows
                        ? query + (seg_begin + r / heads) * p.q_stride_token +
                              (head_begin + r % heads) * p.q_stride_head
                        : nullptr;
      StageQueryRow(tile, r, q, p.head_size);
    }
    if (threadIdx.x < kAttentionRows) {
      const int r = threadIdx.x;
      int lo = 1;
      int hi = 0;
      if (r < rows) {
        VisibleKeyRange(seg_begin + r / heads - q_begin, q_len, kv_len,
                        p.causal, p.window_left, p.window_right, &lo, &hi);
      }
      tile.lo[r] = lo;
      tile.hi[r] = hi;
    }
    __syncthreads();
    int key_lo = 0;
    int key_hi = -1;
    BlockKeyRange(tile, rows, &key_lo, &key_hi);
    KvSequence seq;
    seq.kv_start = kv_start;
    seq.table = p.table.From(b * p.table_stride);
    seq.block_size = p.block_size;
    seq.num_blocks = p.num_blocks;
    RowState<kDims> state;
    AttendStagedRows<NT, kDims>(tile, rows, p.head_size, p.scale, p.key,
                                p.value, seq, kv_head, key_lo, key_hi, &state);
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int r = warp + i * kAttentionWarps;
      if (r < rows) {
        StoreRow<NT, kDims>(state, i,
                            out + (seg_begin + r / heads) * p.o_stride_token +
                                (head_begin + r % heads) * p.o_stride_head,
                            p.head_size);
      }
    }
  }
}

}  // namespace polyops::cuda

namespace polyops {

// Slot 0: own FlashAttention-2 style kernel on CUDA cores
// (cuda/kernels/attention/attention.cuh), every case the contract allows:
// float16, bfloat16 and float32, head sizes 1..256, GQA, causal, both window
// sides, paged and contiguous kv. float32 accumulation and softmax. The grid
// comes from the tensor shapes alone, so cu_seqlens_*_host are accepted and not
// needed: no host synchronization, no allocation, capturable in a CUDA graph.
// cu_seqlens and the block table are read at their own width (int32 or
// int64, cuda::IndexArray): no conversion launch. Malformed cu_seqlens or
// block ids cannot raise ValueError here (that would need a device-to-host
// copy): see FlashAttentionKernel for what they do. Compiled, never
// executed on a GPU when written.
template <>
class Operator<FlashAttention, Device::Type::kCuda, 0> : public FlashAttention {
 public:
  static constexpr const char* kImplementationName = "flash";

  explicit Operator(const Args& args) : FlashAttention(args) {
    const int64_t group = num_heads_ / num_kv_heads_;
    heads_per_block_ = std::min<int64_t>(group, cuda::kAttentionRows);
    head_chunks_ = (group + heads_per_block_ - 1) / heads_per_block_;
    tokens_per_block_ = cuda::kAttentionRows / heads_per_block_;
    constexpr int64_t kMaxGridY = 65535;
    POLYOPS_CHECK_T(num_kv_heads_ * head_chunks_ <= kMaxGridY, NotImplemented,
                    "polyops.flash_attention: flash slot on cuda does not "
                    "support ",
                    num_heads_, " query heads over ", num_kv_heads_,
                    " kv heads because the grid holds at most ", kMaxGridY,
                    " head blocks");
    POLYOPS_CHECK_T(
        !paged_ || block_size_ <= std::numeric_limits<int32_t>::max(),
        NotImplemented,
        "polyops.flash_attention: flash slot on cuda does not support "
        "block size ",
        block_size_, " because the kernel indexes blocks with int32");
    // int32 cu_seqlens_kv cannot describe a sequence of more than INT32_MAX
    // keys; int64 ones could, and the kernel counts keys with int.
    const int64_t max_keys =
        paged_ ? max_blocks_ * block_size_ : num_tokens_kv_;
    POLYOPS_CHECK_T(args.cu_seqlens_kv.dtype() == DataType::kInt32 ||
                        max_keys <= std::numeric_limits<int32_t>::max(),
                    NotImplemented,
                    "polyops.flash_attention: flash slot on cuda does not "
                    "support an int64 cu_seqlens_kv with sequences of up to ",
                    max_keys,
                    " keys because the kernel counts keys with int32");
    DispatchKernel([&](auto kernel) {
      AllowAttentionSharedMemory(kernel, cuda::DimsPerLane(head_size_), kName);
    });
  }

  void operator()(const Handle& handle, const Args& args) const override {
    if (num_tokens_q_ == 0) return;
    cuda::FlashAttentionParams p;
    p.query = args.query.data();
    p.q_stride_token = args.query.stride(0);
    p.q_stride_head = args.query.stride(1);
    p.out = args.out->data();
    p.o_stride_token = args.out->stride(0);
    p.o_stride_head = args.out->stride(1);
    const int token_dim = paged_ ? 1 : 0;
    p.key = {args.key.data(), paged_ ? args.key.stride(0) : 0,
             args.key.stride(token_dim), args.key.stride(-2)};
    p.value = {args.value.data(), paged_ ? args.value.stride(0) : 0,
               args.value.stride(token_dim), args.value.stride(-2)};
    p.cu_q = cuda::IndexArray::Of(args.cu_seqlens_q);
    p.cu_kv = cuda::IndexArray::Of(args.cu_seqlens_kv);
    p.table = paged_ ? cuda::IndexArray::Of(*args.block_table)
                     : cuda::IndexArray{nullptr, false};
    p.table_stride = paged_ ? args.block_table->stride(0) : 0;
    p.max_blocks = max_blocks_;
    p.block_size = paged_ ? static_cast<int>(block_size_) : 0;
    p.num_blocks = num_blocks_;
    p.batch = static_cast<int>(batch_);
    p.total_q = num_tokens_q_;
    p.total_kv = num_tokens_kv_;
    p.head_size = static_cast<int>(head_size_);
    p.group = static_cast<int>(num_heads_ / num_kv_heads_);
    p.heads_per_block = static_cast<int>(heads_per_block_);
    p.head_chunks = static_cast<int>(head_chunks_);
    p.tokens_per_block = static_cast<int>(tokens_per_block_);
    p.scale = scale_;
    p.causal = causal_;
    p.window_left = window_left_;
    p.window_right = window_right_;
    const dim3 grid(
        static_cast<unsigned>((num_tokens_q_ + tokens_per_block_ - 1) /
                              tokens_per_block_),
        static_cast<unsigned>(num_kv_heads_ * head_chunks_));
    const int shared = cuda::AttentionSharedBytes(p.head_size);
    cudaStream_t stream = cuda::StreamOf(handle);
    DispatchKernel([&](auto kernel) {
      kernel<<<grid, cuda::kAttentionThreads, shared, stream>>>(p);
    });
    cuda::CheckLaunch(kName);
  }

 private:
  // Calls fn(kernel) with the instantiation for this dtype and head size.
  template <typename Fn>
  void DispatchKernel(Fn&& fn) const {
    DispatchDataType<POLYOPS_FLOAT_TYPES>(
        dtype_, "polyops.flash_attention", [&](auto tag) {
          using NT = cuda::NativeT<typename decltype(tag)::type>;
          cuda::DispatchDimsPerLane(head_size_, [&](auto dims) {
            fn(cuda::FlashAttentionKernel<NT, decltype(dims)::value>);
          });
        });
  }

  // Tile geometry (FlashAttentionKernel): query heads of one kv head per
  // block, blocks per kv head, query tokens per block.
  int64_t heads_per_block_ = 1;
  int64_t head_chunks_ = 1;
  int64_t tokens_per_block_ = 1;
};

}  // namespace polyops

#endif  // POLYOPS_CUDA_FLASH_ATTENTION_FLASH_CUH_
