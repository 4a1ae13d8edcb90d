#ifndef POLYOPS_CUDA_ADD_VECTOR_CUH_
#define POLYOPS_CUDA_ADD_VECTOR_CUH_

#include "base/add.h"
#include "core/operator.h"
#include "cuda/kernels/elementwise/binary_elementwise.cuh"

namespace polyops {

// Slot 0: 16-byte vectors over contiguous operands, a strided kernel for
// broadcast and strided ones; alpha != 1 as a fused multiply-add
// (compiled, never executed on a GPU yet).
template <>
class Operator<Add, Device::Type::kCuda, 0> : public Add {
 public:
  static constexpr const char* kImplementationName = "vector";
  using Add::Add;

  void operator()(const Handle& handle, const Args& args) const override {
    if (alpha_is_one_) {
      cuda::RunBinary<cuda::AddFn>(layout_, dtype_, *args.out, args.input,
                                   args.other, cuda::StreamOf(handle), kName);
    } else {
      cuda::RunScaledAdd(layout_, dtype_, *args.out, args.input, args.other,
                         alpha_, cuda::StreamOf(handle), kName);
    }
  }
};

}  // namespace polyops

#endif  // POLYOPS_CUDA_ADD_VECTOR_CUH_
