// Building blocks of the row-wise CUDA slots (norms, activations, softmax,
// rotary, KV-cache writes) on top of cuda/kernels/elementwise/elementwise.cuh:
// loads and stores of 16-byte vectors converted to float32, row offsets
// computed on the device, launch geometry, and the two-input activation map
// shared by swiglu and silu_and_mul.
#ifndef POLYOPS_CUDA_KERNELS_ROWS_ROWS_CUH_
#define POLYOPS_CUDA_KERNELS_ROWS_ROWS_CUH_

#include <algorithm>
#include <cstdint>

#include "core/elementwise_layout.h"
#include "core/tensor.h"
#include "cuda/kernels/elementwise/elementwise.cuh"
#include "cuda/runtime/common.cuh"

namespace polyops::cuda {

// kWidth consecutive elements (one 16-byte access for kVector16<N>, a plain
// scalar access for 1) as float32.
template <typename N, int kWidth>
__device__ __forceinline__ void LoadFloats(const N* src, float (&out)[kWidth]) {
  const Vector<N, kWidth> v = *reinterpret_cast<const Vector<N, kWidth>*>(src);
#pragma unroll
  for (int j = 0; j < kWidth; ++j) out[j] = ToFloat(v.values[j]);
}

template <typename N, int kWidth>
__device__ __forceinline__ void StoreFloats(N* dst,
                                            const float (&values)[kWidth]) {
  Vector<N, kWidth> v;
#pragma unroll
  for (int j = 0; j < kWidth; ++j) v.values[j] = FromFloat<N>(values[j]);
  *reinterpret_cast<Vector<N, kWidth>*>(dst) = v;
}

// silu(g) = g / (1 + exp(-g)) in float32 with IEEE ends, as the CPU slots:
// g << 0 gives g / inf = -0, silu(-inf) = -inf / inf = NaN, silu(inf) = inf.
// __fdiv_rn keeps the division IEEE even under --use_fast_math.
__device__ __forceinline__ float Silu(float g) {
  return __fdiv_rn(g, 1.0f + expf(-g));
}

// 1 / sqrt(mean + eps) as the CPU slots compute it, IEEE-rounded at each
// step whatever the compiler flags (rsqrtf would differ in the last bits).
__device__ __forceinline__ float InverseRms(float sum_of_squares,
                                            int64_t hidden, float eps) {
  return __fdiv_rn(
      1.0f,
      __fsqrt_rn(__fdiv_rn(sum_of_squares, static_cast<float>(hidden)) + eps));
}

// Pass 2 of both norms: y = x * scale * w, each thread the elements of the
// stride it read in pass 1 (so y may be x). The CPU slots' order of
// operations.
template <typename N, int kWidth>
__device__ __forceinline__ void ScaleRow(const N* x, const N* w, N* y,
                                         int64_t hidden, float scale) {
  for (int64_t i = threadIdx.x * kWidth; i < hidden; i += blockDim.x * kWidth) {
    float v[kWidth], g[kWidth];
    LoadFloats<N, kWidth>(x + i, v);
    LoadFloats<N, kWidth>(w + i, g);
#pragma unroll
    for (int j = 0; j < kWidth; ++j) v[j] = v[j] * scale * g[j];
    StoreFloats<N, kWidth>(y + i, v);
  }
}

// The rows of a layout: the operands' offsets of row r, for r < count, in
// the row-major order of the layout's first `ndim` dims (a kernel
// parameter, made when the slot is constructed).
template <int K>
struct RowMap {
  StridedIndexer<K> dims;  // ndim 0: one row, every offset 0
  int64_t count = 0;

  // The first `ndim` dims of `layout`: its rows when the last dim is left
  // out, every element when ndim == layout.ndim.
  static RowMap Of(const ElementwiseLayout<K>& layout, int ndim) {
    ElementwiseLayout<K> leading = layout;
    leading.ndim = ndim;
    RowMap map;
    map.dims = StridedIndexer<K>::Make(leading);
    map.count = layout.numel == 0 ? 0 : 1;
    for (int d = 0; d < ndim; ++d) map.count *= layout.shape[d];
    return map;
  }

  // Whether every row of every operand starts a whole number of
  // `width`-element vectors after the operand's first. A dim of size 1 never
  // moves (ElementwiseLayout gives a single row the stride 1).
  bool StridesMultipleOf(int64_t width) const {
    for (int d = 0; d < dims.ndim; ++d) {
      if (dims.shape[d] == 1) continue;
      for (int k = 0; k < K; ++k) {
        if (dims.strides[k][d] % width != 0) return false;
      }
    }
    return true;
  }

  __device__ __forceinline__ void Offsets(int64_t row, int64_t (&at)[K]) const {
    if (dims.ndim == 1) {  // the common case: no division
#pragma unroll
      for (int k = 0; k < K; ++k) at[k] = row * dims.strides[k][0];
      return;
    }
    dims.Offsets(row, at);
  }
};

// One block per row: enough warps for `work` items per row, at most 1024,
// and at most 256 when there are >= 256 rows (smaller blocks keep more of
// them resident per SM, as vLLM's norm kernels do).
inline int RowThreads(int64_t work, int64_t rows) {
  const int64_t limit = rows >= 256 ? 256 : 1024;
  const int64_t warps = (std::max<int64_t>(work, 1) + 31) / 32;
  return static_cast<int>(std::min(warps * 32, limit));
}

// Grid of a one-block-per-row kernel; kernels loop over rows with a stride
// of gridDim.x, so a grid capped at CUDA's x limit still covers every row.
inline unsigned RowBlocks(int64_t rows) {
  return static_cast<unsigned>(std::min<int64_t>(rows, 0x7fffffff));
}

// ---------------------------------------------------------------------------
// out = fn(a, b) elementwise over an ElementwiseLayout<3> (operands out, a,
// b), fn in float32 rounded once to N: swiglu and silu_and_mul.

// How a call walks the layout, fixed at construction.
struct BinaryMapPlan {
  // Rows: the last dim has unit stride in every operand, so it runs
  // contiguously (2-D grid: x over the row, y over rows); `map` holds the
  // leading dims. Otherwise every element computes its own offsets
  // (LaunchStrided over `layout`).
  bool rows = false;
  int64_t inner = 1;
  // 16-byte vectors are possible when the pointers also are 16-byte aligned.
  bool packable = false;
  RowMap<3> map;
  ElementwiseLayout<3> layout;

  static BinaryMapPlan Make(const ElementwiseLayout<3>& layout,
                            int element_size) {
    BinaryMapPlan plan;
    plan.layout = layout;
    const int last = layout.ndim - 1;
    plan.rows = layout.numel > 0 && layout.strides[0][last] == 1 &&
                layout.strides[1][last] == 1 && layout.strides[2][last] == 1;
    if (plan.rows) {
      plan.inner = layout.inner();
      plan.map = RowMap<3>::Of(layout, last);
      const int64_t width = 16 / element_size;
      plan.packable =
          plan.inner % width == 0 && plan.map.StridesMultipleOf(width);
    } else {
      plan.map = RowMap<3>::Of(layout, layout.ndim);  // count = numel
    }
    return plan;
  }
};

template <typename N, int kWidth, typename Fn>
__global__ void __launch_bounds__(256)
    BinaryRowsKernel(N* out, const N* a, const N* b, RowMap<3> rows,
                     int64_t inner, Fn fn) {
  const int64_t column =
      (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kWidth;
  if (column >= inner) return;
  for (int64_t row = blockIdx.y; row < rows.count; row += gridDim.y) {
    int64_t at[3];
    rows.Offsets(row, at);
    float x[kWidth], y[kWidth], result[kWidth];
    LoadFloats<N, kWidth>(a + at[1] + column, x);
    LoadFloats<N, kWidth>(b + at[2] + column, y);
#pragma unroll
    for (int j = 0; j < kWidth; ++j) result[j] = fn(x[j], y[j]);
    StoreFloats<N, kWidth>(out + at[0] + column, result);
  }
}

// One element of the map at the operands' offsets (LaunchStrided's fn).
template <typename N, typename Fn>
struct BinaryAt {
  N* out;
  const N* a;
  const N* b;
  Fn fn;
  __device__ __forceinline__ void operator()(const int64_t (&at)[3]) const {
    out[at[0]] = FromFloat<N>(fn(ToFloat(a[at[1]]), ToFloat(b[at[2]])));
  }
};

// Launches the map on `stream`. Each element is read and written by one
// thread, so `out` may be exactly `a` or `b` (in place).
template <typename N, typename Fn>
void LaunchBinaryMap(const BinaryMapPlan& plan, N* out, const N* a, const N* b,
                     Fn fn, cudaStream_t stream, const char* op) {
  constexpr int kThreads = kElementwiseThreads;
  if (plan.map.count == 0) return;
  if (!plan.rows) {
    LaunchStrided(plan.layout, stream, op, BinaryAt<N, Fn>{out, a, b, fn});
    return;
  }
  const bool packed =
      plan.packable && Aligned16(out) && Aligned16(a) && Aligned16(b);
  const int width = packed ? kVector16<N> : 1;
  const int64_t threads_needed = plan.inner / width;
  const dim3 grid(
      static_cast<unsigned>((threads_needed + kThreads - 1) / kThreads),
      static_cast<unsigned>(std::min<int64_t>(plan.map.count, 65535)));
  if (packed) {
    BinaryRowsKernel<N, kVector16<N>>
        <<<grid, kThreads, 0, stream>>>(out, a, b, plan.map, plan.inner, fn);
  } else {
    BinaryRowsKernel<N, 1>
        <<<grid, kThreads, 0, stream>>>(out, a, b, plan.map, plan.inner, fn);
  }
  CheckLaunch(op);
}

}  // namespace polyops::cuda

#endif  // POLYOPS_CUDA_KERNELS_ROWS_ROWS_CUH_
