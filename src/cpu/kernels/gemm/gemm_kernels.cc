// KernelGemm's dispatch: the ISA check, the orientation, and the choice
// between the AVX-512 decode kernels (gemm_kernels_decode.cc) and the
// packed ones (gemm_kernels_packed.cc), recorded for LastGemmPath.
#include "cpu/kernels/gemm/gemm_kernels.h"

#include <climits>
#include <cstdint>

#include "core/dispatch.h"
#include "cpu/kernels/gemm/gemm_kernels_avx512.h"
#include "cpu/kernels/gemm/gemm_orient.h"
#include "cpu/kernels/rows/avx512_rows.h"

namespace polyops::cpu {
namespace {

thread_local const char* last_path = "openblas";

}  // namespace

const char* LastGemmPath() { return last_path; }
void SetLastGemmPath(const char* path) { last_path = path; }

bool KernelGemm(const GemmLayout& l, DataType dtype, float alpha, float beta,
                const void* a, const void* b, const void* c, void* out) {
  const bool is_bf16 = dtype == DataType::kBFloat16;
  if (is_bf16 ? !HasAvx512Bf16()
              : dtype != DataType::kFloat32 || !HasAvx512()) {
    // Without these kernels, the AVX2 kernels (gemm_kernels_avx2.cc).
    return KernelGemmAvx2(l, dtype, alpha, beta, a, b, c, out);
  }
  bool possible;
  const bool swap =
      SwapOperands(l, &possible);  // cpu/kernels/gemm/gemm_orient.h
  if (!possible) return false;
  const int64_t m = swap ? l.n : l.m;
  // The packed path gathers columns of a column-major b with 32-bit
  // indices (j * ldb, j < kNr); OpenBLAS takes larger leading dims.
  const int64_t b_ld = swap ? l.a_blas.ld : l.b_blas.ld;
  if (m > kSmallM && b_ld > INT32_MAX / kNr) return false;
  const bool use_c = l.has_c && beta != 0.0f;
  const auto run = [&](auto tag, auto element) {
    using T = typename decltype(tag)::type;
    using E = decltype(element);
    GemmMatrix out_m, c_m;
    const Oriented<E> o = Orient<E>(l, swap, a, b, &out_m, &c_m);
    const T* tc = use_c ? static_cast<const T*>(c) : nullptr;
    T* tout = static_cast<T*>(out);
    const bool packed = o.m > kSmallM;
    if (packed) {
      RunPacked<T, E>(o, out_m, c_m, alpha, beta, tc, tout);
    } else {
      RunBlocked<T, E>(o, out_m, c_m, alpha, beta, tc, tout);
    }
    last_path = is_bf16 ? (packed          ? "bf16-packed"
                           : o.b_col_major ? "bf16-dot"
                                           : "bf16-pair")
                        : (packed          ? "f32-packed"
                           : o.b_col_major ? "f32-dot"
                                           : "f32-axpy");
  };
  if (is_bf16) {
    run(TypeTag<BFloat16>{}, uint16_t{});
  } else {
    run(TypeTag<float>{}, float{});
  }
  return true;
}

}  // namespace polyops::cpu
