#ifndef POLYOPS_CUDA_CAUSAL_SOFTMAX_VECTOR_CUH_
#define POLYOPS_CUDA_CAUSAL_SOFTMAX_VECTOR_CUH_

#include "base/causal_softmax.h"
#include "core/dispatch.h"
#include "core/operator.h"
#include "cuda/kernels/rows/rows.cuh"
#include "cuda/runtime/common.cuh"

namespace polyops {
namespace cuda {

// One block per row of scores, three passes over the row's visible keys
// (max, sum of exp(x - max), write), reductions in float32. Packs of kWidth
// keys that are wholly visible are loaded at once; the pack straddling the
// mask edge and the tail past the last whole pack go element by element, so
// masked keys are never read (docs/user/api.md). The max ignores NaN (fmaxf)
// but a NaN still makes its own exp and so the sum NaN: the row is NaN, as
// torch.softmax; +inf gives exp(inf - inf) = NaN, and a row whose visible
// keys are all -inf gives exp(-inf + inf) = NaN likewise. out may be input:
// every element is read and then written by one thread, after the
// reductions.
template <typename N, int kWidth>
__global__ void __launch_bounds__(1024)
    CausalSoftmaxKernel(N* out, const N* input, RowMap<2> rows, int64_t queries,
                        int64_t keys) {
  __shared__ float shared[32];
  for (int64_t row = blockIdx.x; row < rows.count; row += gridDim.x) {
    int64_t at[2];
    rows.Offsets(row, at);
    const N* x = input + at[1];
    N* y = out + at[0];
    // As CausalSoftmax::VisibleKeys: the mask is aligned to the end.
    const int64_t last = row % queries + (keys - queries);
    const int64_t visible = last < 0 ? 0 : (last >= keys ? keys : last + 1);
    const int64_t whole = visible / kWidth * kWidth;  // keys in whole packs
    const int64_t stride = static_cast<int64_t>(blockDim.x) * kWidth;

    float max = -INFINITY;
    for (int64_t i = threadIdx.x * kWidth; i < whole; i += stride) {
      float v[kWidth];
      LoadFloats<N, kWidth>(x + i, v);
#pragma unroll
      for (int j = 0; j < kWidth; ++j) max = fmaxf(max, v[j]);
    }
    for (int64_t i = whole + threadIdx.x; i < visible; i += blockDim.x) {
      max = fmaxf(max, ToFloat(x[i]));
    }
    max = BlockMax(max, shared);

    float sum = 0.0f;
    for (int64_t i = threadIdx.x * kWidth; i < whole; i += stride) {
      float v[kWidth];
      LoadFloats<N, kWidth>(x + i, v);
#pragma unroll
      for (int j = 0; j < kWidth; ++j) sum += expf(v[j] - max);
    }
    for (int64_t i = whole + threadIdx.x; i < visible; i += blockDim.x) {
      sum += expf(ToFloat(x[i]) - max);
    }
    sum = BlockSum(sum, shared);
    const float inverse = __fdiv_rn(1.0f, sum);

    // Write: the same packs and tail elements as the passes above (so each
    // thread reads only what it then overwrites), zeros for masked keys.
    for (int64_t i = threadIdx.x * kWidth; i < whole; i += stride) {
      float v[kWidth];
      LoadFloats<N, kWidth>(x + i, v);
#pragma unroll
      for (int j = 0; j < kWidth; ++j) v[j] = expf(v[j] - max) * inverse;
      StoreFloats<N, kWidth>(y + i, v);
    }
    for (int64_t i = whole + threadIdx.x; i < visible; i += blockDim.x) {
      y[i] = FromFloat<N>(expf(ToFloat(x[i]) - max) * inverse);
    }
    // Masked keys: element-wise up to the first pack boundary, whole packs,
    // then the tail past the last whole pack.
    const int64_t rounded = (visible + kWidth - 1) / kWidth * kWidth;
    const int64_t pack_begin = rounded < keys ? rounded : keys;
    const int64_t pack_end = pack_begin + (keys - pack_begin) / kWidth * kWidth;
    for (int64_t i = visible + threadIdx.x; i < pack_begin; i += blockDim.x) {
      y[i] = FromFloat<N>(0.0f);
    }
    const float zeros[kWidth] = {};
    for (int64_t i = pack_begin + threadIdx.x * kWidth; i < pack_end;
         i += stride) {
      StoreFloats<N, kWidth>(y + i, zeros);
    }
    for (int64_t i = pack_end + threadIdx.x; i < keys; i += blockDim.x) {
      y[i] = FromFloat<N>(0.0f);
    }
  }
}

}  // namespace cuda

// Slot 0: one block per row, 16-byte loads and stores when the row strides
// and the pointers allow, float32 max and sum reduced across the block, any
// row length (no staging). Compiled, never executed on a GPU yet.
template <>
class Operator<CausalSoftmax, Device::Type::kCuda, 0> : public CausalSoftmax {
 public:
  static constexpr const char* kImplementationName = "vector";

  explicit Operator(const Args& args)
      : CausalSoftmax(args), map_(cuda::RowMap<2>::Of(rows_, rows_.ndim)) {
    if (keys_ == 0) map_.count = 0;  // nothing to write
    const int64_t width = 16 / args.input.element_size();
    packable_ = map_.StridesMultipleOf(width);
    threads_ = cuda::RowThreads(keys_ / (packable_ ? width : 1), map_.count);
  }

  void operator()(const Handle& handle, const Args& args) const override {
    if (map_.count == 0) return;
    DispatchDataType<POLYOPS_FLOAT_TYPES>(
        dtype_, "polyops.causal_softmax", [&](auto tag) {
          using N = cuda::NativeT<typename decltype(tag)::type>;
          N* y = static_cast<N*>(args.out->data());
          const N* x = static_cast<const N*>(args.input.data());
          const bool packed =
              packable_ && cuda::Aligned16(y) && cuda::Aligned16(x);
          const cudaStream_t stream = cuda::StreamOf(handle);
          const unsigned blocks = cuda::RowBlocks(map_.count);
          if (packed) {
            cuda::CausalSoftmaxKernel<N, cuda::kVector16<N>>
                <<<blocks, threads_, 0, stream>>>(y, x, map_, queries_, keys_);
          } else {
            cuda::CausalSoftmaxKernel<N, 1>
                <<<blocks, threads_, 0, stream>>>(y, x, map_, queries_, keys_);
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

#endif  // POLYOPS_CUDA_CAUSAL_SOFTMAX_VECTOR_CUH_
