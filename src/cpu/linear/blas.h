#ifndef POLYOPS_CPU_LINEAR_BLAS_H_
#define POLYOPS_CPU_LINEAR_BLAS_H_

#include "base/linear.h"
#include "core/operator.h"
#include "cpu/kernels/gemm/blas_gemm.h"

namespace polyops {

// Slot 0: own AVX-512 kernels where they apply, else OpenBLAS sgemm (see
// cpu/kernels/gemm/blas_gemm.cc, docs/backends/cpu_gemm.md).
template <>
class Operator<Linear, Device::Type::kCpu, 0> : public Linear {
 public:
  static constexpr const char* kImplementationName = "blas";
  using Linear::Linear;

  void operator()(const Handle&, const Args& args) const override {
    cpu::BlasGemm(kName, layout_, dtype_, alpha_, beta_, args.input.data(),
                  args.weight.data(), args.bias ? args.bias->data() : nullptr,
                  args.out->data());
  }
};

}  // namespace polyops

#endif  // POLYOPS_CPU_LINEAR_BLAS_H_
