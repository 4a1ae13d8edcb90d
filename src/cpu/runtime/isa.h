// The one rule for CPU ISA variants. A kernel whose speed depends on the
// vector width is compiled once per tier -- the x86-64 baseline, AVX2 + FMA
// + F16C (POLYOPS_TARGET_AVX2) and AVX-512 F/BW/VL/DQ (POLYOPS_TARGET_AVX512)
// -- and PickIsa() chooses the widest tier the CPU has, within the
// POLYOPS_CPU_ISA cap, so one wheel runs on any x86-64 and tests can run
// every tier on one machine. The build never contracts a*b+c, so the tiers
// give the same bits. How a kernel gets its three builds depends on its
// shape, never on how it is picked:
// - a free function template: POLYOPS_ROW_KERNEL_VARIANTS
//   (cpu/kernels/rows/row_kernels.h);
// - a loop body (lambda): ParallelForIsa / MapBlocks<..., true>
//   (cpu/runtime/parallel.h, cpu/kernels/elementwise/elementwise.h);
// - tiers that differ in more than the target (tile sizes, vector types):
//   one function per tier (AttendTiles* in cpu/kernels/attention/).
// AVX512-BF16 is a feature on top of the AVX-512 tier, checked where the
// bfloat16 paths branch (HasAvx512Bf16), and the matrix products choose
// among their own kernels and libraries (cpu/kernels/gemm/blas_gemm.cc).
#ifndef POLYOPS_CPU_RUNTIME_ISA_H_
#define POLYOPS_CPU_RUNTIME_ISA_H_

#if defined(__x86_64__)
#define POLYOPS_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define POLYOPS_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#else
#define POLYOPS_TARGET_AVX2
#define POLYOPS_TARGET_AVX512
#endif

namespace polyops::cpu {

// POLYOPS_CPU_ISA, read once: caps the kernels' ISA below what the CPU
// has. Unset or empty: no cap; avx512 keeps AVX-512 but not AVX512_BF16.
// Any other value throws InvalidArgument naming the variable; `import
// polyops` reads it (polyops._C._cpu_isa), so a bad value fails the import
// rather than a kernel call.
enum class IsaLimit { kBaseline, kAvx2, kAvx512NoBf16, kNone };
IsaLimit CpuIsaLimit();

// Whether the CPU runs AVX2 + FMA + F16C code, AVX-512 (F, BW, VL, DQ) on
// top, and AVX512_BF16 on top of that (each checked once), within
// CpuIsaLimit().
bool HasAvx2();
bool HasAvx512();
bool HasAvx512Bf16();

// The variant of the widest tier the CPU has: `avx512`, `avx2` or `base`.
template <typename T>
T PickIsa(T base, T avx2, T avx512) {
  return HasAvx512() ? avx512 : HasAvx2() ? avx2 : base;
}

}  // namespace polyops::cpu

#endif  // POLYOPS_CPU_RUNTIME_ISA_H_
