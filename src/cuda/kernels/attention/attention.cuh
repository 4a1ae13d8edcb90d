// What the CUDA attention slots (flash_attention, paged_attention) share: a
// FlashAttention-2 style tile on CUDA cores. A block of kThreads threads
// holds up to kRows query rows (their queries staged as float32 in shared
// memory) and streams the keys and values they see through shared memory in
// pieces of kKeys, keeping a running max, sum and float32 accumulator per
// row (online softmax). Written for correctness first: no tensor cores, no
// 16-byte loads. Compiled, never executed on a GPU in the session that
// wrote it.
//
// Semantics are the CPU slots' (src/cpu/kernels/attention/attention.h): a key
// outside a row's visible range [lo, hi] is left out of the sums entirely (a
// NaN or inf it holds never reaches the row); a NaN or +inf visible score makes
// the row NaN; -inf scores weigh 0 and a row whose visible scores are all -inf
// (or that sees no key) is 0, or NaN where 0 * inf reached the accumulator.
#ifndef POLYOPS_CUDA_KERNELS_ATTENTION_ATTENTION_CUH_
#define POLYOPS_CUDA_KERNELS_ATTENTION_ATTENTION_CUH_

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/data_type.h"
#include "core/error.h"
#include "core/tensor.h"
#include "cuda/runtime/common.cuh"

namespace polyops::cuda {

inline constexpr int kAttentionThreads = 128;
inline constexpr int kAttentionWarps = kAttentionThreads / 32;
inline constexpr int kAttentionRows = 16;  // query rows per block
inline constexpr int kAttentionKeys = 32;  // keys per piece: one per lane
inline constexpr int kRowsPerWarp = kAttentionRows / kAttentionWarps;

// Row strides of the staged q and k pieces: odd, so that lane c reading
// k[c * stride + d] hits 32 different banks.
__host__ __device__ inline int StagedStride(int head_size) {
  return head_size | 1;
}

// Dynamic shared memory of one block: queries and keys with the odd stride,
// values dense (lane d reads v[c * D + d]).
__host__ __device__ inline int AttentionSharedBytes(int head_size) {
  const int stride = StagedStride(head_size);
  return static_cast<int>(sizeof(float)) *
         (kAttentionRows * stride + kAttentionKeys * stride +
          kAttentionKeys * head_size);
}

// Head dims each lane accumulates: the kernels are instantiated for
// D <= 64, <= 128 and <= 256 (a runtime-bounded loop inside), not per D.
inline int DimsPerLane(int64_t head_size) {
  return head_size <= 64 ? 2 : head_size <= 128 ? 4 : 8;
}

// An int32 or int64 index array on the device (cu_seqlens, seq_lens, a
// block table), read at its own width and widened: entries are compared as
// int64, so neither dtype needs a conversion launch or scratch, and an int64
// value outside int32's range stays out of range instead of wrapping.
struct IndexArray {
  const void* data;
  bool wide;  // int64 entries

  static IndexArray Of(const Tensor& tensor) {
    return {tensor.data(), tensor.dtype() == DataType::kInt64};
  }
  __device__ __forceinline__ int64_t operator[](int64_t i) const {
    return wide ? static_cast<const int64_t*>(data)[i]
                : static_cast<const int32_t*>(data)[i];
  }
  // The array from entry `offset` on (a table row).
  __host__ __device__ __forceinline__ IndexArray From(int64_t offset) const {
    const int64_t bytes = offset * (wide ? 8 : 4);
    return {data != nullptr ? static_cast<const char*>(data) + bytes : nullptr,
            wide};
  }
};

// A kv operand: contiguous-by-token ([T, Hkv, D], block_size == 0) or a
// paged cache ([num_blocks, block_size, Hkv, D]); strides in elements.
struct KvOperand {
  const void* data;
  int64_t stride_block, stride_token, stride_head;
};

// Where one sequence's keys live for the block at hand.
struct KvSequence {
  int64_t kv_start;  // first row (contiguous kv only)
  IndexArray table;  // its block table row (paged only)
  int block_size;    // 0: contiguous kv
  int64_t num_blocks;
};

// The row of key j of kv head `kv_head`, or null for a block id outside the
// cache (malformed caller data the device cannot report without a
// device-to-host copy: the key then reads as NaN, never out of bounds).
template <typename NT>
__device__ __forceinline__ const NT* KvRowPointer(const KvOperand& operand,
                                                  const KvSequence& seq,
                                                  int64_t j, int64_t kv_head) {
  const NT* base = static_cast<const NT*>(operand.data);
  if (seq.block_size > 0) {
    const int64_t block = seq.table[j / seq.block_size];
    if (block < 0 || block >= seq.num_blocks) return nullptr;
    return base + block * operand.stride_block +
           (j % seq.block_size) * operand.stride_token +
           kv_head * operand.stride_head;
  }
  return base + (seq.kv_start + j) * operand.stride_token +
         kv_head * operand.stride_head;
}

// Visible keys [lo, hi] of query i of a sequence (causal aligned to the end
// of the kv sequence, then the window), clamped to [0, kv_len - 1] with
// lo > hi when empty; both ends fit int32 after clamping.
__device__ __forceinline__ void VisibleKeyRange(int64_t i, int64_t q_len,
                                                int64_t kv_len, bool causal,
                                                int64_t window_left,
                                                int64_t window_right, int* lo,
                                                int* hi) {
  const int64_t pos = i + kv_len - q_len;
  int64_t first = 0;
  int64_t last = kv_len - 1;
  if (causal) last = min(last, pos);
  if (window_right >= 0) last = min(last, pos + window_right);
  if (window_left >= 0) first = max(first, pos - window_left);
  *lo = static_cast<int>(min(first, kv_len));
  *hi = static_cast<int>(max(last, int64_t{-1}));
}

// The running state of the rows a thread holds: warp w holds rows w, w + 4,
// w + 8, w + 12, lane l their dims l, l + 32, ... (kDims of them).
template <int kDims>
struct RowState {
  float acc[kRowsPerWarp][kDims];
  float max[kRowsPerWarp];
  float sum[kRowsPerWarp];
};

// Shared memory of a block, carved from the dynamic allocation.
struct StagedTile {
  float* q;    // [kAttentionRows][StagedStride(D)]
  float* k;    // [kAttentionKeys][StagedStride(D)]
  float* v;    // [kAttentionKeys][D]
  int* lo;     // [kAttentionRows] first visible key of each row
  int* hi;     // [kAttentionRows] last visible key (lo > hi: none)
  int stride;  // StagedStride(D)
};

// Stages query row r (float32) from `q`, or zeros when q is null (a row the
// block does not hold). Called by one warp, whose lanes split the dims; the
// caller syncs after.
template <typename NT>
__device__ __forceinline__ void StageQueryRow(const StagedTile& tile, int r,
                                              const NT* q, int head_size) {
  const int lane = threadIdx.x & 31;
  for (int d = lane; d < head_size; d += 32) {
    tile.q[r * tile.stride + d] = q != nullptr ? ToFloat(q[d]) : 0.0f;
  }
}

// Runs rows [0, rows) (queries and visible ranges already staged in `tile`,
// synced) over keys [key_lo, key_hi] of one sequence and kv head. Every
// thread of the block calls it; on return `state` holds the rows' online
// softmax state (unnormalized accumulator, max, sum).
template <typename NT, int kDims>
__device__ void AttendStagedRows(const StagedTile& tile, int rows,
                                 int head_size, float scale,
                                 const KvOperand& key, const KvOperand& value,
                                 const KvSequence& seq, int64_t kv_head,
                                 int key_lo, int key_hi,
                                 RowState<kDims>* state) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    state->max[i] = -INFINITY;
    state->sum[i] = 0.0f;
#pragma unroll
    for (int k = 0; k < kDims; ++k) state->acc[i][k] = 0.0f;
  }
  // int64 so that stepping past a key_hi near INT32_MAX cannot overflow.
  for (int64_t c0 = key_lo; c0 <= key_hi; c0 += kAttentionKeys) {
    const int n = static_cast<int>(
        min(static_cast<int64_t>(kAttentionKeys), key_hi - c0 + 1));
    __syncthreads();  // the previous piece's values may still be read
    for (int c = warp; c < n; c += kAttentionWarps) {
      const NT* k_row = KvRowPointer<NT>(key, seq, c0 + c, kv_head);
      const NT* v_row = KvRowPointer<NT>(value, seq, c0 + c, kv_head);
      for (int d = lane; d < head_size; d += 32) {
        tile.k[c * tile.stride + d] =
            k_row != nullptr ? ToFloat(k_row[d]) : NAN;
        tile.v[c * head_size + d] = v_row != nullptr ? ToFloat(v_row[d]) : NAN;
      }
    }
    __syncthreads();
    // Scores of the warp's rows against key `lane`: each staged key element
    // loaded once serves all of them. Lanes past the piece or rows the block
    // does not hold compute on whatever the tile holds there; `visible`
    // below keeps those results out of every sum.
    float score[kRowsPerWarp];
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) score[i] = 0.0f;
    {
      const float* k = tile.k + lane * tile.stride;
      const float* q = tile.q + warp * tile.stride;
      for (int d = 0; d < head_size; ++d) {
        const float kd = k[d];
#pragma unroll
        for (int i = 0; i < kRowsPerWarp; ++i) {
          score[i] += q[i * kAttentionWarps * tile.stride + d] * kd;
        }
      }
    }
    // Each row's visible keys of this piece, [c0 + begin, c0 + end), and
    // its weights p (0 for keys it does not see). Warp-uniform per row.
    int begin[kRowsPerWarp];
    int end[kRowsPerWarp];
    float p[kRowsPerWarp];
    int any_begin = n;
    int any_end = 0;
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int r = warp + i * kAttentionWarps;
      begin[i] = 0;
      end[i] = 0;
      p[i] = 0.0f;
      if (r < rows) {
        begin[i] = static_cast<int>(max(tile.lo[r] - c0, int64_t{0}));
        end[i] =
            static_cast<int>(min(tile.hi[r] - c0 + 1, static_cast<int64_t>(n)));
      }
      // No visible key in this piece: no update at all, as the CPU tile.
      if (begin[i] >= end[i]) continue;
      any_begin = min(any_begin, begin[i]);
      any_end = max(any_end, end[i]);
      const bool visible = lane >= begin[i] && lane < end[i];
      const float s = score[i] * scale;
      // fmaxf skips NaN: a NaN score drops out of the max, not the exps.
      const float piece_max = WarpMax(visible ? s : -INFINITY);
      const float new_max = fmaxf(state->max[i], piece_max);
      // All visible scores so far -inf: shift by 0, so the weights are
      // exp(-inf) = 0 and the row ends 0, not exp(-inf + inf) = NaN.
      const float shift = new_max == -INFINITY ? 0.0f : new_max;
      const float correction = expf(state->max[i] - shift);
      p[i] = visible ? expf(s - shift) : 0.0f;
      state->sum[i] = state->sum[i] * correction + WarpSum(p[i]);
      state->max[i] = new_max;
#pragma unroll
      for (int k = 0; k < kDims; ++k) state->acc[i][k] *= correction;
    }
    // Values: each staged value row loaded once for all the warp's rows;
    // only a row's visible keys enter its sum (0 * inf would be NaN).
    for (int c = any_begin; c < any_end; ++c) {
      float v[kDims];
#pragma unroll
      for (int k = 0; k < kDims; ++k) {
        const int d = lane + 32 * k;
        v[k] = d < head_size ? tile.v[c * head_size + d] : 0.0f;
      }
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) {
        const float weight = __shfl_sync(0xffffffffu, p[i], c);
        if (c >= begin[i] && c < end[i]) {
#pragma unroll
          for (int k = 0; k < kDims; ++k) state->acc[i][k] += weight * v[k];
        }
      }
    }
  }
}

// The smallest and largest visible key over rows [0, rows) of `tile`
// (synced), i.e. the pieces the block must stream.
__device__ __forceinline__ void BlockKeyRange(const StagedTile& tile, int rows,
                                              int* key_lo, int* key_hi) {
  int lo = INT32_MAX;
  int hi = -1;
  for (int r = 0; r < rows; ++r) {
    if (tile.lo[r] <= tile.hi[r]) {
      lo = min(lo, tile.lo[r]);
      hi = max(hi, tile.hi[r]);
    }
  }
  *key_lo = lo;
  *key_hi = hi;
}

__device__ __forceinline__ StagedTile CarveTile(float* shared, int head_size,
                                                int* ranges) {
  StagedTile tile;
  tile.stride = StagedStride(head_size);
  tile.q = shared;
  tile.k = tile.q + kAttentionRows * tile.stride;
  tile.v = tile.k + kAttentionKeys * tile.stride;
  tile.lo = ranges;
  tile.hi = ranges + kAttentionRows;
  return tile;
}

// Writes row i of `state` (the thread's share of it), normalized, to `o`
// (null: the row is not held). Sum 0 (no key, or all scores -inf) gives 0,
// or NaN where 0 * inf reached the accumulator; a NaN sum stays NaN.
template <typename NT, int kDims>
__device__ __forceinline__ void StoreRow(const RowState<kDims>& state, int i,
                                         NT* o, int head_size) {
  const int lane = threadIdx.x & 31;
  const float inverse = state.sum[i] == 0.0f ? 0.0f : 1.0f / state.sum[i];
#pragma unroll
  for (int k = 0; k < kDims; ++k) {
    const int d = lane + 32 * k;
    if (d < head_size) o[d] = FromFloat<NT>(state.acc[i][k] * inverse);
  }
}

// Sets the largest dynamic shared memory any head size of one kernel
// instantiation (kDims dims per lane) needs, so that instances with
// different head sizes sharing it never lower each other's limit.
template <typename Kernel>
void AllowAttentionSharedMemory(Kernel kernel, int dims_per_lane,
                                const char* op) {
  const int bytes = AttentionSharedBytes(32 * dims_per_lane);
  Check(cudaFuncSetAttribute(
            kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
        op, "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
}

// Calls fn(std::integral_constant<int, kDims>) for the instantiation that
// covers `head_size` (<= 256, checked by the base classes).
template <typename Fn>
void DispatchDimsPerLane(int64_t head_size, Fn&& fn) {
  switch (DimsPerLane(head_size)) {
    case 2:
      fn(std::integral_constant<int, 2>{});
      break;
    case 4:
      fn(std::integral_constant<int, 4>{});
      break;
    default:
      fn(std::integral_constant<int, 8>{});
      break;
  }
}

}  // namespace polyops::cuda

#endif  // POLYOPS_CUDA_KERNELS_ATTENTION_ATTENTION_CUH_
