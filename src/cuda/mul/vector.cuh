#ifndef POLYOPS_CUDA_MUL_VECTOR_CUH_
#define POLYOPS_CUDA_MUL_VECTOR_CUH_

#include "base/mul.h"
#include "core/operator.h"
#include "cuda/kernels/elementwise/binary_elementwise.cuh"

namespace polyops {

// Slot 0: 16-byte vectors over contiguous operands, a strided kernel for
// broadcast and strided ones (compiled, never executed on a GPU yet).
template <>
class Operator<Mul, Device::Type::kCuda, 0> : public Mul {
 public:
  static constexpr const char* kImplementationName = "vector";
  using Mul::Mul;

  void operator()(const Handle& handle, const Args& args) const override {
    cuda::RunBinary<cuda::MulFn>(layout_, dtype_, *args.out, args.input,
                                 args.other, cuda::StreamOf(handle), kName);
  }
};

}  // namespace polyops

#endif  // POLYOPS_CUDA_MUL_VECTOR_CUH_
