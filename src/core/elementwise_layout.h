#ifndef POLYOPS_CORE_ELEMENTWISE_LAYOUT_H_
#define POLYOPS_CORE_ELEMENTWISE_LAYOUT_H_

#include <algorithm>
#include <cstdint>

#include "core/tensor.h"

namespace polyops {

// torch's broadcast of two shapes: right-aligned, each pair of dims equal or
// one of them 1 (a missing dim counts as 1). Writes the result to `shape`
// (`*ndim` dims) and returns true, or returns false if they do not
// broadcast.
inline bool BroadcastShapes(int a_ndim, const int64_t* a, int b_ndim,
                            const int64_t* b, int* ndim, int64_t* shape) {
  const int n = std::max(a_ndim, b_ndim);
  for (int d = 1; d <= n; ++d) {
    const int64_t x = d <= a_ndim ? a[a_ndim - d] : 1;
    const int64_t y = d <= b_ndim ? b[b_ndim - d] : 1;
    if (x != y && x != 1 && y != 1) return false;
    shape[n - d] = x == 1 ? y : x;
  }
  *ndim = n;
  return true;
}

// The strides of an operand of `ndim` dims read at a broadcast shape of
// `to_ndim` >= ndim dims: right-aligned, 0 for its size-1 and missing dims.
inline void BroadcastStrides(int ndim, const int64_t* shape,
                             const int64_t* strides, int to_ndim,
                             int64_t* out) {
  const int offset = to_ndim - ndim;
  for (int d = 0; d < offset; ++d) out[d] = 0;
  for (int d = 0; d < ndim; ++d) {
    out[offset + d] = shape[d] == 1 ? 0 : strides[d];
  }
}

// The iteration space of an elementwise op over K operands that share one
// shape (broadcast operands, whichever they are, carry stride 0: see
// BroadcastStrides), with size-1 dims dropped and adjacent dims merged
// wherever every operand allows it (runs of stride-0 dims merge too). A
// contiguous call collapses to one dim with unit strides; backends use that as
// the fast path.
template <int K>
struct ElementwiseLayout {
  int ndim = 1;
  int64_t shape[kMaxDims] = {1};
  int64_t strides[K][kMaxDims] = {};
  int64_t numel = 1;

  bool IsContiguous1D() const {
    if (ndim != 1) return false;
    for (int k = 0; k < K; ++k) {
      if (strides[k][0] != 1 && shape[0] > 1) return false;
    }
    return true;
  }
  int64_t inner() const { return shape[ndim - 1]; }
  int64_t runs() const { return inner() == 0 ? 0 : numel / inner(); }

  // Element offsets of every operand for the element at `linear` (row-major
  // position in the iteration space).
  void Offsets(int64_t linear, int64_t (&offsets)[K]) const {
    for (int k = 0; k < K; ++k) offsets[k] = 0;
    for (int d = ndim - 1; d >= 0 && linear > 0; --d) {
      const int64_t index = linear % shape[d];
      linear /= shape[d];
      for (int k = 0; k < K; ++k) offsets[k] += index * strides[k][d];
    }
  }

  static ElementwiseLayout Make(int ndim, const int64_t* shape,
                                const int64_t* const (&operand_strides)[K]) {
    ElementwiseLayout layout;
    layout.numel = 1;
    for (int d = 0; d < ndim; ++d) layout.numel *= shape[d];
    if (layout.numel == 0) {
      layout.shape[0] = 0;
      return layout;
    }
    int out = 0;
    for (int d = 0; d < ndim; ++d) {
      if (shape[d] == 1) continue;
      bool merge = out > 0;
      for (int k = 0; k < K && merge; ++k) {
        merge = layout.strides[k][out - 1] == operand_strides[k][d] * shape[d];
      }
      if (merge) {
        layout.shape[out - 1] *= shape[d];
        for (int k = 0; k < K; ++k) {
          layout.strides[k][out - 1] = operand_strides[k][d];
        }
      } else {
        layout.shape[out] = shape[d];
        for (int k = 0; k < K; ++k) {
          layout.strides[k][out] = operand_strides[k][d];
        }
        ++out;
      }
    }
    if (out == 0) {  // a single element
      layout.shape[0] = 1;
      for (int k = 0; k < K; ++k) layout.strides[k][0] = 1;
      out = 1;
    }
    layout.ndim = out;
    return layout;
  }
};

}  // namespace polyops

#endif  // POLYOPS_CORE_ELEMENTWISE_LAYOUT_H_
