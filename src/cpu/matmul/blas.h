#ifndef POLYOPS_CPU_MATMUL_BLAS_H_
#define POLYOPS_CPU_MATMUL_BLAS_H_

#include "base/matmul.h"
#include "core/operator.h"
#include "cpu/kernels/gemm/blas_gemm.h"

namespace polyops {

// Slot 0: own AVX-512 kernels where they apply, else OpenBLAS sgemm (see
// cpu/kernels/gemm/blas_gemm.cc, docs/backends/cpu_gemm.md); one batched
// product per outer batch index (GemmLayout::outer).
template <>
class Operator<Matmul, Device::Type::kCpu, 0> : public Matmul {
 public:
  static constexpr const char* kImplementationName = "blas";
  using Matmul::Matmul;

  void operator()(const Handle&, const Args& args) const override {
    ForEachOuterProduct(layout_, DataTypeSize(dtype_), args.input.data(),
                        args.other.data(), args.out->data(),
                        [&](const void* a, const void* b, void* y) {
                          cpu::BlasGemm(kName, layout_, dtype_, alpha_, beta_,
                                        a, b, nullptr, y);
                        });
  }
};

}  // namespace polyops

#endif  // POLYOPS_CPU_MATMUL_BLAS_H_
