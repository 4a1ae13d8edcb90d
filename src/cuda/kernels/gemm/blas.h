// The CUDA matrix-product driver behind matmul, gemm and linear: cuBLASLt
// (cublasLtMatmul) or cuBLAS (cublasGemmStridedBatchedEx) on the validated
// GemmLayout of src/base/gemm_base.h, with float32 accumulation for every
// dtype and no TF32 (see docs/backends/cuda_ops.md, "matmul, gemm, linear").
#ifndef POLYOPS_CUDA_KERNELS_GEMM_BLAS_H_
#define POLYOPS_CUDA_KERNELS_GEMM_BLAS_H_

// Absent from a build without cuBLAS headers (docs/backends/cuda.md, "cuBLAS /
// cuBLASLt"): POLYOPS_WITH_CUBLAS is then undefined.
#ifdef POLYOPS_WITH_CUBLAS

#include <cublasLt.h>
#include <cublas_v2.h>

#include <cstddef>
#include <cstdint>

#include "core/data_type.h"
#include "core/gemm_layout.h"
#include "core/handle.h"
#include "cuda/kernels/gemm/blas_problem.h"

namespace polyops::cuda {

enum class BlasLibrary { kCublasLt, kCublas };

// A failed cuBLAS / cuBLASLt call: BackendError (RuntimeError) naming the op,
// the call and cuBLAS' own status text.
void CheckBlas(cublasStatus_t status, const char* op, const char* what);

// One product out = alpha * a @ b (+ beta * c) of a fixed layout, planned on
// the instance cache's miss (descriptors, layouts, cuBLASLt heuristics) so
// that Run only sets the stream and launches: no cudaMalloc, no host
// synchronization, capturable in a CUDA graph.
class BlasGemm {
 public:
  BlasGemm(const char* op, BlasLibrary library, const GemmLayout& layout,
           DataType dtype, double alpha, double beta);
  ~BlasGemm();
  BlasGemm(const BlasGemm&) = delete;
  BlasGemm& operator=(const BlasGemm&) = delete;

  // c may be null when the layout has no c; c == out is the in-place form.
  void Run(const Handle& handle, const void* a, const void* b, const void* c,
           void* out) const;

 private:
  struct LtPlan;

  void PlanLt();
  void RunLt(const Handle& handle, const void* first, const void* second,
             void* out) const;
  void RunCublas(const Handle& handle, const void* first, const void* second,
                 void* out) const;

  const char* op_;
  BlasLibrary library_;
  GemmLayout layout_;
  DataType dtype_;
  float alpha_;
  float beta_;
  int device_ = 0;
  // The product term is absent (k == 0 or alpha == 0): out = beta * c or 0,
  // without reading a or b, as BLAS.
  bool fill_only_ = false;
  // beta * c is added: c is first copied into out, then out is the
  // product's C (beta applied by cuBLAS in float32).
  bool use_c_ = false;
  ColumnMajorProduct product_;
  size_t cublas_workspace_bytes_ = 0;
  LtPlan* lt_ = nullptr;  // owned; cuBLASLt slot only
};

}  // namespace polyops::cuda

#endif  // POLYOPS_WITH_CUBLAS

#endif  // POLYOPS_CUDA_KERNELS_GEMM_BLAS_H_
