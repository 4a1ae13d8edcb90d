#ifndef POLYOPS_CUDA_ADD_RMS_NORM_VECTOR_CUH_
#define POLYOPS_CUDA_ADD_RMS_NORM_VECTOR_CUH_

#include "base/add_rms_norm.h"
#include "core/dispatch.h"
#include "core/operator.h"
#include "cuda/kernels/rows/rows.cuh"
#include "cuda/runtime/common.cuh"

namespace polyops {
namespace cuda {

// One block per row. Pass 1 stores x = x1 + x2 rounded to N and sums the
// squares of the rounded values; pass 2 reads x back (each thread the
// elements it stored) and writes y = x * scale * gamma, so y is
// rms_norm(x_out) bit for bit, as on CPU. Every element of every operand is
// touched by one thread only, and x1/x2 are not read after pass 1, so x_out
// and y_out may each be x1 or x2 (vLLM's in-place residual).
template <typename N, int kWidth>
__global__ void __launch_bounds__(1024)
    AddRmsNormKernel(N* y_out, N* x_out, const N* x1, const N* x2,
                     const N* gamma, RowMap<4> rows, int64_t hidden,
                     float eps) {
  __shared__ float shared[32];
  for (int64_t row = blockIdx.x; row < rows.count; row += gridDim.x) {
    int64_t at[4];
    rows.Offsets(row, at);
    N* y = y_out + at[0];
    N* x = x_out + at[1];
    const N* a = x1 + at[2];
    const N* b = x2 + at[3];
    float sum = 0.0f;
    for (int64_t i = threadIdx.x * kWidth; i < hidden;
         i += blockDim.x * kWidth) {
      float u[kWidth], v[kWidth];
      LoadFloats<N, kWidth>(a + i, u);
      LoadFloats<N, kWidth>(b + i, v);
      Vector<N, kWidth> pack;
#pragma unroll
      for (int j = 0; j < kWidth; ++j) {
        pack.values[j] = FromFloat<N>(u[j] + v[j]);
        const float rounded = ToFloat(pack.values[j]);
        sum += rounded * rounded;
      }
      *reinterpret_cast<Vector<N, kWidth>*>(x + i) = pack;
    }
    sum = BlockSum(sum, shared);
    ScaleRow<N, kWidth>(x, gamma, y, hidden, InverseRms(sum, hidden, eps));
  }
}

}  // namespace cuda

// Slot 0: the residual add fused with rms_norm, one block per row, 16-byte
// loads and stores when hidden, the row strides and the pointers allow.
// Compiled, never executed on a GPU yet.
template <>
class Operator<AddRmsNorm, Device::Type::kCuda, 0> : public AddRmsNorm {
 public:
  static constexpr const char* kImplementationName = "vector";

  explicit Operator(const Args& args)
      : AddRmsNorm(args), map_(cuda::RowMap<4>::Of(rows_, rows_.ndim)) {
    if (hidden_ == 0) map_.count = 0;  // nothing to write
    const int64_t width = 16 / args.x1.element_size();
    packable_ = hidden_ % width == 0 && map_.StridesMultipleOf(width);
    threads_ = cuda::RowThreads(hidden_ / (packable_ ? width : 1), map_.count);
  }

  void operator()(const Handle& handle, const Args& args) const override {
    if (map_.count == 0) return;
    DispatchDataType<POLYOPS_FLOAT_TYPES>(
        dtype_, "polyops.add_rms_norm", [&](auto tag) {
          using N = cuda::NativeT<typename decltype(tag)::type>;
          N* y = static_cast<N*>(args.y_out->data());
          N* x = static_cast<N*>(args.x_out->data());
          const N* a = static_cast<const N*>(args.x1.data());
          const N* b = static_cast<const N*>(args.x2.data());
          const N* g = static_cast<const N*>(args.gamma.data());
          const bool packed = packable_ && cuda::Aligned16(y) &&
                              cuda::Aligned16(x) && cuda::Aligned16(a) &&
                              cuda::Aligned16(b) && cuda::Aligned16(g);
          const cudaStream_t stream = cuda::StreamOf(handle);
          const unsigned blocks = cuda::RowBlocks(map_.count);
          const float eps_f = static_cast<float>(args.eps);
          if (packed) {
            cuda::AddRmsNormKernel<N, cuda::kVector16<N>>
                <<<blocks, threads_, 0, stream>>>(y, x, a, b, g, map_, hidden_,
                                                  eps_f);
          } else {
            cuda::AddRmsNormKernel<N, 1><<<blocks, threads_, 0, stream>>>(
                y, x, a, b, g, map_, hidden_, eps_f);
          }
          cuda::CheckLaunch(kName);
        });
  }

 private:
  cuda::RowMap<4> map_;
  bool packable_ = false;
  int threads_ = 32;
};

}  // namespace polyops

#endif  // POLYOPS_CUDA_ADD_RMS_NORM_VECTOR_CUH_
