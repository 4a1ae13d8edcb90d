#ifndef POLYOPS_CUDA_GEMM_CUBLASLT_CUH_
#define POLYOPS_CUDA_GEMM_CUBLASLT_CUH_

#ifdef POLYOPS_WITH_CUBLAS

#include <optional>

#include "base/gemm.h"
#include "core/operator.h"
#include "cuda/kernels/gemm/blas.h"

namespace polyops {

// Slot 0: cublasLtMatmul with descriptors, layouts and the heuristic's
// algorithm chosen on the cache miss (see cuda/kernels/gemm/blas.h); the
// default.
template <>
class Operator<Gemm, Device::Type::kCuda, 0> : public Gemm {
 public:
  static constexpr const char* kImplementationName = "cublaslt";
  using Gemm::Gemm;

  void operator()(const Handle& handle, const Args& args) const override {
    gemm_.Run(handle, args.a.data(), args.b.data(),
              args.c ? args.c->data() : nullptr, args.out->data());
  }

 private:
  cuda::BlasGemm gemm_{
      kName, cuda::BlasLibrary::kCublasLt, layout_, dtype_, alpha_, beta_};
};

}  // namespace polyops

#endif  // POLYOPS_WITH_CUBLAS

#endif  // POLYOPS_CUDA_GEMM_CUBLASLT_CUH_
