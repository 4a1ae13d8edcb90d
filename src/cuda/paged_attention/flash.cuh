#ifndef POLYOPS_CUDA_PAGED_ATTENTION_FLASH_CUH_
#define POLYOPS_CUDA_PAGED_ATTENTION_FLASH_CUH_

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "base/paged_attention.h"
#include "core/dispatch.h"
#include "core/operator.h"
#include "cuda/kernels/attention/attention.cuh"
#include "cuda/runtime/common.cuh"

namespace polyops::cuda {

struct PagedAttentionParams {
  const void* query;
  int64_t q_stride_batch, q_stride_head;
  void* out;
  int64_t o_stride_batch, o_stride_head;
  KvOperand key, value;
  IndexArray seq_lens;
  IndexArray table;
  int64_t table_stride;
  int64_t max_blocks;
  int block_size;
  int64_t num_blocks;
  int num_heads;
  int head_size;
  int group;        // query heads per kv head
  int head_chunks;  // ceil(group / kAttentionRows): blocks per kv head
  float scale;
  int64_t partition_len;  // keys per split of the context
  int partitions;         // splits the grid has
  // Per (sequence, head, split): the unnormalized float32 accumulator [D]
  // and (max, sum). Null when partitions == 1: the kernel writes `out`.
  float* partial_acc;
  float* partial_stats;
};

// A sequence length is caller data read on the device, where it cannot
// raise ValueError without a host synchronization: outside [0, capacity]
// the sequence's rows are NaN instead, and nothing is read out of bounds.
__device__ __forceinline__ bool ValidSeqLen(int64_t len,
                                            const PagedAttentionParams& p) {
  return len >= 0 && len <= p.max_blocks * p.block_size;
}

// Grid (partitions, Hkv * head_chunks, B): block (x, y, b) runs keys
// [x * partition_len, (x + 1) * partition_len) of sequence b for up to
// kAttentionRows query heads of one kv head (each staged key serves all of
// them). Split-K so that a small batch with long contexts fills the GPU.
template <typename NT, int kDims>
__global__ void __launch_bounds__(kAttentionThreads)
    PagedAttentionKernel(PagedAttentionParams p) {
  extern __shared__ float shared[];
  __shared__ int ranges[2 * kAttentionRows];
  const StagedTile tile = CarveTile(shared, p.head_size, ranges);
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int64_t b = blockIdx.z;
  const int64_t kv_head = blockIdx.y / p.head_chunks;
  const int chunk = blockIdx.y % p.head_chunks;
  const int64_t head_begin = kv_head * p.group + chunk * kAttentionRows;
  const int rows = min(kAttentionRows, p.group - chunk * kAttentionRows);
  const int64_t len = p.seq_lens[b];
  const bool direct = p.partial_acc == nullptr;
  NT* out = static_cast<NT*>(p.out);
  if (!ValidSeqLen(len, p)) {
    if (direct) {  // else the reduce kernel writes the NaN rows
      for (int r = warp; r < rows; r += kAttentionWarps) {
        NT* o = out + b * p.o_stride_batch + (head_begin + r) * p.o_stride_head;
        for (int d = lane; d < p.head_size; d += 32) o[d] = FromFloat<NT>(NAN);
      }
    }
    return;
  }
  const int64_t key_begin = blockIdx.x * p.partition_len;
  // Splits past the end have nothing to add; the reduce kernel skips them.
  // With a single split the block runs even for len 0 and writes zeros.
  if (!direct && key_begin >= len) return;
  const int64_t key_end = min(key_begin + p.partition_len, len);

  const NT* query = static_cast<const NT*>(p.query);
  for (int r = warp; r < kAttentionRows; r += kAttentionWarps) {
    const NT* q = r < rows ? query + b * p.q_stride_batch +
                                 (head_begin + r) * p.q_stride_head
                           : nullptr;
    StageQueryRow(tile, r, q, p.head_size);
  }
  if (threadIdx.x < kAttentionRows) {
    // The decode query is the sequence's last token: no mask.
    const bool held = static_cast<int>(threadIdx.x) < rows;
    tile.lo[threadIdx.x] = held ? static_cast<int>(key_begin) : 1;
    tile.hi[threadIdx.x] = held ? static_cast<int>(key_end - 1) : 0;
  }
  __syncthreads();
  KvSequence seq;
  seq.kv_start = 0;
  seq.table = p.table.From(b * p.table_stride);
  seq.block_size = p.block_size;
  seq.num_blocks = p.num_blocks;
  RowState<kDims> state;
  AttendStagedRows<NT, kDims>(tile, rows, p.head_size, p.scale, p.key, p.value,
                              seq, kv_head, static_cast<int>(key_begin),
                              static_cast<int>(key_end - 1), &state);
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int r = warp + i * kAttentionWarps;
    if (r >= rows) continue;
    const int64_t head = head_begin + r;
    if (direct) {
      StoreRow<NT, kDims>(state, i,
                          out + b * p.o_stride_batch + head * p.o_stride_head,
                          p.head_size);
      continue;
    }
    const int64_t split = (b * p.num_heads + head) * p.partitions + blockIdx.x;
    float* acc = p.partial_acc + split * p.head_size;
#pragma unroll
    for (int k = 0; k < kDims; ++k) {
      const int d = lane + 32 * k;
      if (d < p.head_size) acc[d] = state.acc[i][k];
    }
    if (lane == 0) {
      p.partial_stats[2 * split] = state.max[i];
      p.partial_stats[2 * split + 1] = state.sum[i];
    }
  }
}

// Grid (Hq, B): merges the splits of one (sequence, head) as one online
// softmax would: weights exp(max_split - max), with the same rules (shift 0
// when every max is -inf; a sum of 0 gives 0, NaN where the accumulator is).
template <typename NT>
__global__ void __launch_bounds__(kAttentionThreads)
    PagedAttentionReduceKernel(PagedAttentionParams p) {
  const int64_t head = blockIdx.x;
  const int64_t b = blockIdx.y;
  const int64_t len = p.seq_lens[b];
  NT* o =
      static_cast<NT*>(p.out) + b * p.o_stride_batch + head * p.o_stride_head;
  if (!ValidSeqLen(len, p)) {
    for (int d = threadIdx.x; d < p.head_size; d += blockDim.x) {
      o[d] = FromFloat<NT>(NAN);
    }
    return;
  }
  const int64_t used = min(static_cast<int64_t>(p.partitions),
                           (len + p.partition_len - 1) / p.partition_len);
  const int64_t first = (b * p.num_heads + head) * p.partitions;
  float max = -INFINITY;
  for (int64_t s = 0; s < used; ++s) {
    max = fmaxf(max, p.partial_stats[2 * (first + s)]);
  }
  const float shift = max == -INFINITY ? 0.0f : max;
  for (int d = threadIdx.x; d < p.head_size; d += blockDim.x) {
    float sum = 0.0f;
    float acc = 0.0f;
    for (int64_t s = 0; s < used; ++s) {
      const float weight = expf(p.partial_stats[2 * (first + s)] - shift);
      sum += weight * p.partial_stats[2 * (first + s) + 1];
      acc += weight * p.partial_acc[(first + s) * p.head_size + d];
    }
    const float inverse = sum == 0.0f ? 0.0f : 1.0f / sum;
    o[d] = FromFloat<NT>(acc * inverse);
  }
}

}  // namespace polyops::cuda

namespace polyops {

// Slot 0: own decode kernel on CUDA cores
// (cuda/kernels/attention/attention.cuh), every case the contract allows
// (float16, bfloat16, float32, head sizes 1..256, GQA, any cache strides, so
// NHD/HND views of one allocation). One block per (context split, kv head,
// sequence) holding up to 16 query heads of the kv head, so each cached key is
// read once per group; with more than one split the float32 partials go to a
// cuda::Workspace and a second kernel merges them. The split count comes from
// seq_lens_host when given (its largest length), else from the table's capacity
// (max_blocks * block_size): never from the device, so no host synchronization
// and the call can be captured in a CUDA graph. Lengths and block ids are read
// on the device at their own width (int32 or int64, cuda::IndexArray) and
// cannot raise ValueError: see ValidSeqLen and KvRowPointer.
// A device length larger than seq_lens_host said is cut at the splits the
// host sized (the mirrors must agree, as the contract says).
// Compiled, never executed on a GPU when written.
template <>
class Operator<PagedAttention, Device::Type::kCuda, 0> : public PagedAttention {
 public:
  static constexpr const char* kImplementationName = "flash";

  explicit Operator(const Args& args) : PagedAttention(args) {
    constexpr int64_t kMaxGridYZ = 65535;
    const int64_t group = num_heads_ / num_kv_heads_;
    head_chunks_ = (group + cuda::kAttentionRows - 1) / cuda::kAttentionRows;
    POLYOPS_CHECK_T(
        num_kv_heads_ * head_chunks_ <= kMaxGridYZ && batch_ <= kMaxGridYZ,
        NotImplemented,
        "polyops.paged_attention: flash slot on cuda does not support ", batch_,
        " sequences of ", num_heads_,
        " query heads because the grid holds at most ", kMaxGridYZ,
        " sequences and ", kMaxGridYZ, " head blocks");
    capacity_ = max_blocks_ * block_size_;
    POLYOPS_CHECK_T(capacity_ <= std::numeric_limits<int32_t>::max(),
                    NotImplemented,
                    "polyops.paged_attention: flash slot on cuda does not "
                    "support a block table of ",
                    capacity_,
                    " tokens per sequence because the kernel indexes keys "
                    "with int32");
    DispatchKernels([&](auto kernel, auto) {
      AllowAttentionSharedMemory(kernel, cuda::DimsPerLane(head_size_), kName);
    });
  }

  void operator()(const Handle& handle, const Args& args) const override {
    if (batch_ == 0) return;
    // The longest context the grid must cover: the host mirror's (clamped
    // to the table, as the kernel treats longer lengths as invalid), else
    // the table's capacity.
    int64_t max_len = capacity_;
    if (args.seq_lens_host) {
      const std::vector<int64_t> lens = WidenIndices(
          args.seq_lens_host->data(), args.seq_lens_host->dtype(), batch_);
      max_len = 0;
      for (const int64_t len : lens) max_len = std::max(max_len, len);
      max_len = std::min(max_len, capacity_);
    }
    const int64_t blocks_per_split = batch_ * num_kv_heads_ * head_chunks_;
    int64_t splits = 1;
    int64_t split_len = std::max<int64_t>(max_len, 1);
    if (max_len > kMinSplitLen) {
      splits = std::clamp<int64_t>(
          (kTargetBlocks + blocks_per_split - 1) / blocks_per_split, 1,
          (max_len + kMinSplitLen - 1) / kMinSplitLen);
      split_len = (max_len + splits - 1) / splits;
      split_len = (split_len + cuda::kAttentionKeys - 1) /
                  cuda::kAttentionKeys * cuda::kAttentionKeys;
      splits = (max_len + split_len - 1) / split_len;
    }

    cuda::PagedAttentionParams p;
    p.query = args.query.data();
    p.q_stride_batch = args.query.stride(0);
    p.q_stride_head = args.query.stride(1);
    p.out = args.out->data();
    p.o_stride_batch = args.out->stride(0);
    p.o_stride_head = args.out->stride(1);
    p.key = {args.key_cache.data(), args.key_cache.stride(0),
             args.key_cache.stride(1), args.key_cache.stride(2)};
    p.value = {args.value_cache.data(), args.value_cache.stride(0),
               args.value_cache.stride(1), args.value_cache.stride(2)};
    p.seq_lens = cuda::IndexArray::Of(args.seq_lens);
    p.table = cuda::IndexArray::Of(args.block_table);
    p.table_stride = args.block_table.stride(0);
    p.max_blocks = max_blocks_;
    p.block_size = static_cast<int>(block_size_);
    p.num_blocks = num_blocks_;
    p.num_heads = static_cast<int>(num_heads_);
    p.head_size = static_cast<int>(head_size_);
    p.group = static_cast<int>(num_heads_ / num_kv_heads_);
    p.head_chunks = static_cast<int>(head_chunks_);
    p.scale = scale_;
    p.partition_len = split_len;
    p.partitions = static_cast<int>(splits);
    p.partial_acc = nullptr;
    p.partial_stats = nullptr;

    cudaStream_t stream = cuda::StreamOf(handle);
    const dim3 grid(static_cast<unsigned>(splits),
                    static_cast<unsigned>(num_kv_heads_ * head_chunks_),
                    static_cast<unsigned>(batch_));
    const int shared = cuda::AttentionSharedBytes(p.head_size);
    if (splits == 1) {
      DispatchKernels([&](auto kernel, auto) {
        kernel<<<grid, cuda::kAttentionThreads, shared, stream>>>(p);
      });
      cuda::CheckLaunch(kName);
      return;
    }
    const size_t rows = static_cast<size_t>(batch_ * num_heads_ * splits);
    const size_t acc_floats = rows * static_cast<size_t>(head_size_);
    cuda::Workspace workspace(handle, (acc_floats + 2 * rows) * sizeof(float),
                              kName);
    p.partial_acc = static_cast<float*>(workspace.data());
    p.partial_stats = p.partial_acc + acc_floats;
    DispatchKernels([&](auto kernel, auto reduce) {
      kernel<<<grid, cuda::kAttentionThreads, shared, stream>>>(p);
      cuda::CheckLaunch(kName);
      reduce<<<dim3(static_cast<unsigned>(num_heads_),
                    static_cast<unsigned>(batch_)),
               cuda::kAttentionThreads, 0, stream>>>(p);
      cuda::CheckLaunch(kName);
    });
  }

 private:
  // Splits are added until the grid has about this many blocks (a few
  // waves on an H100's 132 SMs)...
  static constexpr int64_t kTargetBlocks = 1024;
  // ...but none shorter than this many keys, where the merge would cost
  // more than the split saves.
  static constexpr int64_t kMinSplitLen = 256;

  // Calls fn(kernel, reduce_kernel) for this dtype and head size.
  template <typename Fn>
  void DispatchKernels(Fn&& fn) const {
    DispatchDataType<POLYOPS_FLOAT_TYPES>(
        dtype_, "polyops.paged_attention", [&](auto tag) {
          using NT = cuda::NativeT<typename decltype(tag)::type>;
          cuda::DispatchDimsPerLane(head_size_, [&](auto dims) {
            fn(cuda::PagedAttentionKernel<NT, decltype(dims)::value>,
               cuda::PagedAttentionReduceKernel<NT>);
          });
        });
  }

  int64_t head_chunks_ = 1;
  int64_t capacity_ = 0;  // max_blocks * block_size
};

}  // namespace polyops

#endif  // POLYOPS_CUDA_PAGED_ATTENTION_FLASH_CUH_
