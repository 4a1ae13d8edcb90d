#ifndef POLYOPS_CUDA_SILU_AND_MUL_VLLM_CUH_
#define POLYOPS_CUDA_SILU_AND_MUL_VLLM_CUH_

#include "base/silu_and_mul.h"
#include "core/dispatch.h"
#include "core/operator.h"
#include "cuda/kernels/rows/rows.cuh"
#include "cuda/runtime/common.cuh"

namespace polyops {
namespace cuda {

// vLLM's rounding (csrc/activation_kernels.cu): silu(gate) is rounded to
// the dtype before the product, which is then rounded again. The same as
// slot 0 for float32.
template <typename N>
struct SiluRoundedMulFn {
  __device__ __forceinline__ float operator()(float gate, float up) const {
    return ToFloat(FromFloat<N>(Silu(gate))) * up;
  }
};

}  // namespace cuda

// Slot 1: silu_and_mul with vLLM's two roundings (slot 0's walk and packs),
// for bit-for-bit agreement with vLLM's CUDA kernel; the CPU backend has a
// slot of the same index and name. Compiled, never executed on a GPU yet.
template <>
class Operator<SiluAndMul, Device::Type::kCuda, 1> : public SiluAndMul {
 public:
  static constexpr const char* kImplementationName = "vllm";

  explicit Operator(const Args& args)
      : SiluAndMul(args),
        plan_(cuda::BinaryMapPlan::Make(layout_, args.input.element_size())) {}

  void operator()(const Handle& handle, const Args& args) const override {
    DispatchDataType<POLYOPS_FLOAT_TYPES>(
        dtype_, "polyops.silu_and_mul", [&](auto tag) {
          using N = cuda::NativeT<typename decltype(tag)::type>;
          const N* gate = static_cast<const N*>(args.input.data());
          cuda::LaunchBinaryMap(plan_, static_cast<N*>(args.out->data()), gate,
                                gate + up_offset_, cuda::SiluRoundedMulFn<N>{},
                                cuda::StreamOf(handle), kName);
        });
  }

 private:
  cuda::BinaryMapPlan plan_;
};

}  // namespace polyops

#endif  // POLYOPS_CUDA_SILU_AND_MUL_VLLM_CUH_
