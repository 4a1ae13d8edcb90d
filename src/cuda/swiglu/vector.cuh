#ifndef POLYOPS_CUDA_SWIGLU_VECTOR_CUH_
#define POLYOPS_CUDA_SWIGLU_VECTOR_CUH_

#include "base/swiglu.h"
#include "core/dispatch.h"
#include "core/operator.h"
#include "cuda/kernels/rows/rows.cuh"
#include "cuda/runtime/common.cuh"

namespace polyops {
namespace cuda {

struct SwigluFn {
  __device__ __forceinline__ float operator()(float x, float gate) const {
    return x * Silu(gate);
  }
};

}  // namespace cuda

// Slot 0: out = input * silu(gate) in float32, rounded once. Rows whose last
// dim runs contiguously in all three tensors go through 16-byte packs when
// the pointers and strides allow; any other layout computes each element's
// offsets. Compiled, never executed on a GPU yet.
template <>
class Operator<Swiglu, Device::Type::kCuda, 0> : public Swiglu {
 public:
  static constexpr const char* kImplementationName = "vector";

  explicit Operator(const Args& args)
      : Swiglu(args),
        plan_(cuda::BinaryMapPlan::Make(layout_, args.input.element_size())) {}

  void operator()(const Handle& handle, const Args& args) const override {
    DispatchDataType<POLYOPS_FLOAT_TYPES>(
        dtype_, "polyops.swiglu", [&](auto tag) {
          using N = cuda::NativeT<typename decltype(tag)::type>;
          cuda::LaunchBinaryMap(plan_, static_cast<N*>(args.out->data()),
                                static_cast<const N*>(args.input.data()),
                                static_cast<const N*>(args.gate.data()),
                                cuda::SwigluFn{}, cuda::StreamOf(handle),
                                kName);
        });
  }

 private:
  cuda::BinaryMapPlan plan_;
};

}  // namespace polyops

#endif  // POLYOPS_CUDA_SWIGLU_VECTOR_CUH_
