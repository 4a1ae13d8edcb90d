// The rotation kernel shared by the CUDA slots of rotary_embedding and
// apply_rotary_pos_emb (cpu/kernels/rotary/rotary.h is its CPU counterpart).
#ifndef POLYOPS_CUDA_KERNELS_ROTARY_ROTARY_CUH_
#define POLYOPS_CUDA_KERNELS_ROTARY_ROTARY_CUH_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>

#include "base/rotary_layout.h"
#include "core/dispatch.h"
#include "core/tensor.h"
#include "cuda/runtime/common.cuh"

namespace polyops::cuda {

// Where token t's cos and sin rows are: row r = positions[t] (or t itself
// when `positions` is null) of two tables with their own row strides.
template <typename C>
struct RotaryTable {
  const C* cos = nullptr;
  const C* sin = nullptr;
  int64_t cos_stride = 0;
  int64_t sin_stride = 0;
  const void* positions = nullptr;  // int32 or int64, or null
  bool positions_int32 = false;
  int64_t position_stride = 1;
  int64_t rows = 0;  // valid rows: [0, rows)
};

// One block per token (tokens strided by gridDim.x); its threads walk every
// (head, pair) of query and then key, so the token's cos/sin row is read
// from cache by all heads. Each pair is read and written by one thread,
// which makes the in-place form safe. A position outside [0, rows) cannot
// be reported without a copy to the host: the kernel does not read the
// table then and writes NaN to that token's rotary dims instead (never an
// out-of-bounds access, never a plausible-looking wrong result).
template <typename N, typename C>
__global__ void __launch_bounds__(512)
    RotaryKernel(RotaryGeometry g, const N* query, N* query_out, const N* key,
                 N* key_out, RotaryTable<C> table) {
  const int half = static_cast<int>(g.rotary_dim / 2);
  const int query_heads = static_cast<int>(g.query.heads);
  const int heads =
      query_heads + (g.has_key ? static_cast<int>(g.key.heads) : 0);
  const int pairs = heads * half;
  const int tail = static_cast<int>(g.head_size - g.rotary_dim);
  for (int64_t t = blockIdx.x; t < g.tokens; t += gridDim.x) {
    int64_t row = t;
    if (table.positions != nullptr) {
      const int64_t at = t * table.position_stride;
      row = table.positions_int32
                ? static_cast<int64_t>(
                      static_cast<const int32_t*>(table.positions)[at])
                : static_cast<const int64_t*>(table.positions)[at];
    }
    const bool valid = row >= 0 && row < table.rows;
    const C* cos = table.cos + (valid ? row : 0) * table.cos_stride;
    const C* sin = table.sin + (valid ? row : 0) * table.sin_stride;
    for (int item = threadIdx.x; item < pairs; item += blockDim.x) {
      const int head = item / half;
      const int i = item - head * half;
      const bool is_key = head >= query_heads;
      const int h = is_key ? head - query_heads : head;
      const RotaryHeads& in = is_key ? g.key : g.query;
      const RotaryHeads& out = is_key ? g.key_out : g.query_out;
      const N* x =
          (is_key ? key : query) + t * in.token_stride + h * in.head_stride;
      N* y = (is_key ? key_out : query_out) + t * out.token_stride +
             h * out.head_stride;
      const int first = g.neox ? i : 2 * i;
      const int second = g.neox ? i + half : 2 * i + 1;
      const float c = valid ? ToFloat(cos[i]) : NAN;
      const float s = valid ? ToFloat(sin[i]) : NAN;
      const float x1 = ToFloat(x[first]);
      const float x2 = ToFloat(x[second]);
      y[first] = FromFloat<N>(x1 * c - x2 * s);
      y[second] = FromFloat<N>(x2 * c + x1 * s);
    }
    // Out of place: the dims past rotary_dim are copied through.
    if (tail > 0 && !(g.query_in_place && g.key_in_place)) {
      for (int item = threadIdx.x; item < heads * tail; item += blockDim.x) {
        const int head = item / tail;
        const int64_t d = g.rotary_dim + (item - head * tail);
        const bool is_key = head >= query_heads;
        if (is_key ? g.key_in_place : g.query_in_place) continue;
        const int h = is_key ? head - query_heads : head;
        const RotaryHeads& in = is_key ? g.key : g.query;
        const RotaryHeads& out = is_key ? g.key_out : g.query_out;
        (is_key ? key_out
                : query_out)[t * out.token_stride + h * out.head_stride + d] =
            (is_key ? key
                    : query)[t * in.token_stride + h * in.head_stride + d];
      }
    }
  }
}

// The kernel indexes a token's heads with 32-bit ints.
inline void CheckRotaryFits(const RotaryGeometry& g, const char* op) {
  const int64_t heads = g.query.heads + (g.has_key ? g.key.heads : 0);
  POLYOPS_CHECK_T(heads * g.head_size < (int64_t{1} << 31), NotImplemented,
                  "polyops.", op,
                  ": the CUDA slot does not support (query heads + key "
                  "heads) * head_size >= 2**31 because it indexes a token's "
                  "heads with 32-bit ints; got ",
                  heads, " heads of ", g.head_size);
}

// Launches RotaryKernel for every token on `stream` (nothing for 0 tokens).
template <typename N, typename C>
void LaunchRotary(const RotaryGeometry& g, const N* query, N* query_out,
                  const N* key, N* key_out, const RotaryTable<C>& table,
                  cudaStream_t stream, const char* op) {
  if (g.tokens == 0) return;
  const int64_t heads = g.query.heads + (g.has_key ? g.key.heads : 0);
  const int64_t pairs = std::max<int64_t>(heads * (g.rotary_dim / 2), 1);
  const int threads =
      static_cast<int>(std::min<int64_t>((pairs + 31) / 32 * 32, 512));
  const unsigned blocks =
      static_cast<unsigned>(std::min<int64_t>(g.tokens, 0x7fffffff));
  RotaryKernel<N, C><<<blocks, threads, 0, stream>>>(g, query, query_out, key,
                                                     key_out, table);
  CheckLaunch(op);
}

// Both rotary slots' call: dispatches the tensors' dtype and the table's
// (float32, or the tensors' own), lets `fill` point a RotaryTable<C> at the
// op's cos/sin source, and rotates query and key into their outputs (in
// place where an output is absent) on the handle's stream.
template <typename Fill>
void RotateQueryKey(const Handle& handle, const RotaryGeometry& g,
                    DataType dtype, DataType table_dtype, const Tensor& query,
                    const std::optional<Tensor>& key,
                    const std::optional<Tensor>& query_out,
                    const std::optional<Tensor>& key_out, const char* op,
                    Fill&& fill) {
  DispatchDataType<POLYOPS_FLOAT_TYPES>(dtype, op, [&](auto tag) {
    using N = NativeT<typename decltype(tag)::type>;
    auto rotate = [&](auto table_tag) {
      using C = NativeT<typename decltype(table_tag)::type>;
      RotaryTable<C> table;
      fill(table);
      LaunchRotary<N, C>(
          g, static_cast<const N*>(query.data()),
          static_cast<N*>((query_out ? *query_out : query).data()),
          key ? static_cast<const N*>(key->data()) : nullptr,
          key ? static_cast<N*>((key_out ? *key_out : *key).data()) : nullptr,
          table, StreamOf(handle), op);
    };
    if (table_dtype == DataType::kFloat32) {
      rotate(TypeTag<float>{});
    } else {
      rotate(tag);
    }
  });
}

}  // namespace polyops::cuda

#endif  // POLYOPS_CUDA_KERNELS_ROTARY_ROTARY_CUH_
