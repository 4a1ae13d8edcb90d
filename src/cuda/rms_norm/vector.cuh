#ifndef POLYOPS_CUDA_RMS_NORM_VECTOR_CUH_
#define POLYOPS_CUDA_RMS_NORM_VECTOR_CUH_

#include "base/rms_norm.h"
#include "core/dispatch.h"
#include "core/operator.h"
#include "cuda/kernels/rows/rows.cuh"
#include "cuda/runtime/common.cuh"

namespace polyops {
namespace cuda {

// One block per row (rows strided by gridDim.x). Pass 1 sums the squares in
// float32 (BlockSum), pass 2 reads the row again (from cache) and writes
// x * scale * w, the CPU slots' order of operations. Each element is read
// and written by the same thread, so out may be input (in place).
template <typename N, int kWidth>
__global__ void __launch_bounds__(1024)
    RmsNormKernel(N* out, const N* input, const N* weight, RowMap<2> rows,
                  int64_t hidden, float eps) {
  __shared__ float shared[32];
  for (int64_t row = blockIdx.x; row < rows.count; row += gridDim.x) {
    int64_t at[2];
    rows.Offsets(row, at);
    const N* x = input + at[1];
    N* y = out + at[0];
    float sum = 0.0f;
    for (int64_t i = threadIdx.x * kWidth; i < hidden;
         i += blockDim.x * kWidth) {
      float v[kWidth];
      LoadFloats<N, kWidth>(x + i, v);
#pragma unroll
      for (int j = 0; j < kWidth; ++j) sum += v[j] * v[j];
    }
    sum = BlockSum(sum, shared);
    ScaleRow<N, kWidth>(x, weight, y, hidden, InverseRms(sum, hidden, eps));
  }
}

}  // namespace cuda

// Slot 0: one block per row, 16-byte loads and stores when hidden, the row
// strides and the pointers allow (scalar accesses otherwise), float32 sum of
// squares reduced across the block. Compiled, never executed on a GPU yet.
template <>
class Operator<RmsNorm, Device::Type::kCuda, 0> : public RmsNorm {
 public:
  static constexpr const char* kImplementationName = "vector";

  explicit Operator(const Args& args)
      : RmsNorm(args), map_(cuda::RowMap<2>::Of(rows_, rows_.ndim)) {
    if (hidden_ == 0) map_.count = 0;  // nothing to write
    const int64_t width = 16 / args.input.element_size();
    packable_ = hidden_ % width == 0 && map_.StridesMultipleOf(width);
    threads_ = cuda::RowThreads(hidden_ / (packable_ ? width : 1), map_.count);
  }

  void operator()(const Handle& handle, const Args& args) const override {
    if (map_.count == 0) return;
    DispatchDataType<POLYOPS_FLOAT_TYPES>(
        dtype_, "polyops.rms_norm", [&](auto tag) {
          using N = cuda::NativeT<typename decltype(tag)::type>;
          N* y = static_cast<N*>(args.out->data());
          const N* x = static_cast<const N*>(args.input.data());
          const N* w = static_cast<const N*>(args.weight.data());
          const bool packed = packable_ && cuda::Aligned16(y) &&
                              cuda::Aligned16(x) && cuda::Aligned16(w);
          const cudaStream_t stream = cuda::StreamOf(handle);
          const unsigned blocks = cuda::RowBlocks(map_.count);
          const float eps_f = static_cast<float>(args.eps);
          if (packed) {
            cuda::RmsNormKernel<N, cuda::kVector16<N>>
                <<<blocks, threads_, 0, stream>>>(y, x, w, map_, hidden_,
                                                  eps_f);
          } else {
            cuda::RmsNormKernel<N, 1><<<blocks, threads_, 0, stream>>>(
                y, x, w, map_, hidden_, eps_f);
          }
          cuda::CheckLaunch(kName);
        });
  }

 private:
  cuda::RowMap<2> map_;
  bool packable_ = false;
  int threads_ = 32;
};

}  // namespace polyops

#endif  // POLYOPS_CUDA_RMS_NORM_VECTOR_CUH_
