// The CPU matrix-product driver behind matmul, gemm and linear: oneDNN's
// matmul (cpu/kernels/gemm/onednn.h) past the decode rows (float32 with
// AVX-512, bfloat16 with AVX512-BF16), polyops' own kernels
// (cpu/kernels/gemm/gemm_kernels.h) where they apply, else OpenBLAS sgemm (the
// scipy-openblas32 wheel) on float32 data, float16/bfloat16 converted through
// float32 workspaces. POLYOPS_CPU_GEMM=auto|onednn|own|openblas overrides the
// choice (docs/backends/cpu_gemm.md).
#ifndef POLYOPS_CPU_KERNELS_GEMM_BLAS_GEMM_H_
#define POLYOPS_CPU_KERNELS_GEMM_BLAS_GEMM_H_

#include "core/data_type.h"
#include "core/gemm_layout.h"

namespace polyops::cpu {

// out = alpha * a @ b (+ beta * c when layout.has_c) on the data of a
// validated layout; c may be null when !layout.has_c. Throws
// InvalidArgument when out overlaps an input (other than out == c) or
// POLYOPS_CPU_GEMM has another value, BackendError when oneDNN fails.
void BlasGemm(const char* op, const GemmLayout& layout, DataType dtype,
              double alpha, double beta, const void* a, const void* b,
              const void* c, void* out);

// Whether the bfloat16 routes see AVX512-BF16: the own kernels' bfloat16
// variants, and oneDNN past the decode rows (with POLYOPS_CPU_ISA applied).
bool GemmHasAvx512Bf16();

}  // namespace polyops::cpu

#endif  // POLYOPS_CPU_KERNELS_GEMM_BLAS_GEMM_H_
