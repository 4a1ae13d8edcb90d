#ifndef POLYOPS_CUDA_MATMUL_CUBLASLT_CUH_
#define POLYOPS_CUDA_MATMUL_CUBLASLT_CUH_

#ifdef POLYOPS_WITH_CUBLAS

#include <optional>

#include "base/matmul.h"
#include "core/operator.h"
#include "cuda/kernels/gemm/blas.h"

namespace polyops {

// Slot 0: cublasLtMatmul with descriptors, layouts and the heuristic's
// algorithm chosen on the cache miss (see cuda/kernels/gemm/blas.h); the
// default.
template <>
class Operator<Matmul, Device::Type::kCuda, 0> : public Matmul {
 public:
  static constexpr const char* kImplementationName = "cublaslt";
  using Matmul::Matmul;

  void operator()(const Handle& handle, const Args& args) const override {
    // One launch per outer batch index (GemmLayout::outer), usually one.
    ForEachOuterProduct(layout_, DataTypeSize(dtype_), args.input.data(),
                        args.other.data(), args.out->data(),
                        [&](const void* a, const void* b, void* y) {
                          gemm_.Run(handle, a, b, nullptr, y);
                        });
  }

 private:
  cuda::BlasGemm gemm_{
      kName, cuda::BlasLibrary::kCublasLt, layout_, dtype_, alpha_, beta_};
};

}  // namespace polyops

#endif  // POLYOPS_WITH_CUBLAS

#endif  // POLYOPS_CUDA_MATMUL_CUBLASLT_CUH_
