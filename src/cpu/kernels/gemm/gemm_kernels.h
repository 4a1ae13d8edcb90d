// polyops' own AVX-512 matrix-product kernels, run by BlasGemm ahead of
// OpenBLAS: bfloat16 (AVX512-BF16 vdpbf16ps on the bfloat16 data: no
// operand is converted; past kSmallM rows b is packed, still bfloat16, into
// the pair layout vdpbf16ps reads) and float32 (FMA), every size: at
// decode sizes sgemm is slow.
#ifndef POLYOPS_CPU_KERNELS_GEMM_GEMM_KERNELS_H_
#define POLYOPS_CPU_KERNELS_GEMM_GEMM_KERNELS_H_

#include "core/data_type.h"
#include "core/gemm_layout.h"

namespace polyops::cpu {

// Products with at most this many rows (m, decode) read b in place; larger
// ones pack it per column strip (the "packed" paths).
inline constexpr int64_t kSmallM = 32;

// out = alpha * a @ b (+ beta * c when layout.has_c and beta != 0) and
// true, or false without touching out when no kernel applies (float16, a
// column-major a with a row-major b, or float32 on a CPU without AVX-512
// past the AVX2 kernels' kSmallM rows: see KernelGemmAvx2); the caller then
// runs OpenBLAS.
// Requires batch, m, n, k >= 1 and alpha != 0. Sums run in float32 in an
// order fixed by the shape alone (not the thread count).
bool KernelGemm(const GemmLayout& layout, DataType dtype, float alpha,
                float beta, const void* a, const void* b, const void* c,
                void* out);

// KernelGemm for a CPU without those kernels (gemm_kernels_avx2.cc): AVX2 +
// FMA, float32 and bfloat16 (widened in registers, read in place). float32
// at decode sizes only (m <= kSmallM after orientation); bfloat16 at every
// size, past kSmallM rows in blocks of at most kSmallM rows. false when it
// does not apply (no AVX2, POLYOPS_CPU_ISA=baseline, float16, float32 with
// a larger m).
bool KernelGemmAvx2(const GemmLayout& layout, DataType dtype, float alpha,
                    float beta, const void* a, const void* b, const void* c,
                    void* out);

// The path the last matmul/gemm/linear CPU call of this thread took, for
// benchmarks: "bf16-dot", "bf16-pair", "bf16-packed" (AVX512-BF16
// kernels), "f32-dot", "f32-axpy", "f32-packed" (AVX-512F kernels),
// "f32-dot-avx2", "f32-axpy-avx2", "bf16-dot-avx2", "bf16-axpy-avx2" (AVX2
// kernels) or "openblas" (sgemm; float16/bfloat16 through float32
// workspaces). See docs/backends/cpu_gemm.md.
const char* LastGemmPath();
void SetLastGemmPath(const char* path);

}  // namespace polyops::cpu

#endif  // POLYOPS_CPU_KERNELS_GEMM_GEMM_KERNELS_H_
