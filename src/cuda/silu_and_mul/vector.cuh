#ifndef POLYOPS_CUDA_SILU_AND_MUL_VECTOR_CUH_
#define POLYOPS_CUDA_SILU_AND_MUL_VECTOR_CUH_

#include "base/silu_and_mul.h"
#include "core/dispatch.h"
#include "core/operator.h"
#include "cuda/kernels/rows/rows.cuh"
#include "cuda/runtime/common.cuh"

namespace polyops {
namespace cuda {

// polyops' contract: silu(gate) * up in float32, rounded once.
struct SiluAndMulFn {
  __device__ __forceinline__ float operator()(float gate, float up) const {
    return Silu(gate) * up;
  }
};

}  // namespace cuda

// Slot 0: out = silu(input[..., :d]) * input[..., d:], rounded once. Rows
// whose last dim runs contiguously go through 16-byte packs when d, the
// strides and the pointers (gate, up = gate + d, out) allow; any other
// layout computes each element's offsets. Compiled, never executed on a GPU
// yet.
template <>
class Operator<SiluAndMul, Device::Type::kCuda, 0> : public SiluAndMul {
 public:
  static constexpr const char* kImplementationName = "vector";

  explicit Operator(const Args& args)
      : SiluAndMul(args),
        plan_(cuda::BinaryMapPlan::Make(layout_, args.input.element_size())) {}

  void operator()(const Handle& handle, const Args& args) const override {
    DispatchDataType<POLYOPS_FLOAT_TYPES>(
        dtype_, "polyops.silu_and_mul", [&](auto tag) {
          using N = cuda::NativeT<typename decltype(tag)::type>;
          const N* gate = static_cast<const N*>(args.input.data());
          cuda::LaunchBinaryMap(plan_, static_cast<N*>(args.out->data()), gate,
                                gate + up_offset_, cuda::SiluAndMulFn{},
                                cuda::StreamOf(handle), kName);
        });
  }

 private:
  cuda::BinaryMapPlan plan_;
};

}  // namespace polyops

#endif  // POLYOPS_CUDA_SILU_AND_MUL_VECTOR_CUH_
