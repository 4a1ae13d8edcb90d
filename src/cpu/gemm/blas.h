#ifndef POLYOPS_CPU_GEMM_BLAS_H_
#define POLYOPS_CPU_GEMM_BLAS_H_

#include "base/gemm.h"
#include "core/operator.h"
#include "cpu/kernels/gemm/blas_gemm.h"

namespace polyops {

// Slot 0: own AVX-512 kernels where they apply, else OpenBLAS sgemm (see
// cpu/kernels/gemm/blas_gemm.cc, docs/backends/cpu_gemm.md).
template <>
class Operator<Gemm, Device::Type::kCpu, 0> : public Gemm {
 public:
  static constexpr const char* kImplementationName = "blas";
  using Gemm::Gemm;

  void operator()(const Handle&, const Args& args) const override {
    cpu::BlasGemm(kName, layout_, dtype_, alpha_, beta_, args.a.data(),
                  args.b.data(), args.c ? args.c->data() : nullptr,
                  args.out->data());
  }
};

}  // namespace polyops

#endif  // POLYOPS_CPU_GEMM_BLAS_H_
