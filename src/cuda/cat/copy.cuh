#ifndef POLYOPS_CUDA_CAT_COPY_CUH_
#define POLYOPS_CUDA_CAT_COPY_CUH_

#include <cstdint>
#include <vector>

#include "base/cat.h"
#include "core/operator.h"
#include "cuda/kernels/elementwise/elementwise.cuh"

namespace polyops {
namespace cuda {

template <typename E>
struct CopyStridedFn {
  E* out;
  const E* input;
  __device__ __forceinline__ void operator()(const int64_t (&at)[2]) const {
    out[at[0]] = input[at[1]];
  }
};

}  // namespace cuda

// Slot 0: per piece, one cudaMemcpyAsync where the piece and its slice of
// `out` are both contiguous, one cudaMemcpy2DAsync where both are rows of
// contiguous elements (a cat along the last dim), else a strided copy kernel
// over elements of the dtype's width (compiled, never executed on a GPU
// yet). All are stream ordered and capturable in a CUDA graph.
template <>
class Operator<Cat, Device::Type::kCuda, 0> : public Cat {
 public:
  static constexpr const char* kImplementationName = "copy";
  using Cat::Cat;

  void operator()(const Handle& handle, const Args& args) const override {
    switch (element_size_) {
      case 1:
        return Run<uint8_t>(handle, args.tensors, *args.out);
      case 2:
        return Run<uint16_t>(handle, args.tensors, *args.out);
      case 4:
        return Run<uint32_t>(handle, args.tensors, *args.out);
      default:
        return Run<uint64_t>(handle, args.tensors, *args.out);
    }
  }

 private:
  // Two dims, unit inner strides, row pitches no shorter than a row (what
  // cudaMemcpy2DAsync accepts).
  static bool IsPitched2D(const ElementwiseLayout<2>& layout) {
    if (layout.ndim != 2) return false;
    for (int k = 0; k < 2; ++k) {
      if (layout.strides[k][1] != 1) return false;
      if (layout.strides[k][0] < layout.shape[1]) return false;
    }
    return true;
  }

  template <typename E>
  void Run(const Handle& handle, const std::vector<Tensor>& tensors,
           const Tensor& out) const {
    const cudaStream_t stream = cuda::StreamOf(handle);
    E* const out_base = static_cast<E*>(out.data());
    for (size_t p = 0; p < pieces_.size(); ++p) {
      const Piece& piece = pieces_[p];
      if (piece.layout.numel == 0) continue;
      E* const dst = out_base + piece.out_offset;
      const E* const src = static_cast<const E*>(tensors[p].data());
      const ElementwiseLayout<2>& layout = piece.layout;
      if (layout.IsContiguous1D()) {
        cuda::Check(cudaMemcpyAsync(dst, src, layout.numel * sizeof(E),
                                    cudaMemcpyDeviceToDevice, stream),
                    kName, "cudaMemcpyAsync");
      } else if (IsPitched2D(layout)) {
        // Rows of contiguous elements, e.g. a cat along the last dim.
        cuda::Check(
            cudaMemcpy2DAsync(dst, layout.strides[0][0] * sizeof(E), src,
                              layout.strides[1][0] * sizeof(E),
                              layout.shape[1] * sizeof(E), layout.shape[0],
                              cudaMemcpyDeviceToDevice, stream),
            kName, "cudaMemcpy2DAsync");
      } else {
        cuda::LaunchStrided(piece.layout, stream, kName,
                            cuda::CopyStridedFn<E>{dst, src});
      }
    }
  }
};

}  // namespace polyops

#endif  // POLYOPS_CUDA_CAT_COPY_CUH_
