// oneDNN's matmul primitive as a path of the CPU matrix-product driver
// (cpu/kernels/gemm/blas_gemm.cc). polyops never links oneDNN: the C API of
// libdnnl.so.3 (the onednn-cpu-gomp wheel, GNU OpenMP like torch) is resolved
// with dlopen/dlsym at the first call that wants it. A build without the oneDNN
// headers (CMake POLYOPS_ONEDNN=OFF, or AUTO without them) compiles the path
// out; it then reports itself unavailable. See docs/backends/cpu_gemm.md.
#ifndef POLYOPS_CPU_KERNELS_GEMM_ONEDNN_H_
#define POLYOPS_CPU_KERNELS_GEMM_ONEDNN_H_

#include <string>

#include "core/data_type.h"
#include "core/gemm_layout.h"

namespace polyops::cpu::onednn {

struct Info {
  bool compiled = false;   // built with the oneDNN headers
  bool available = false;  // the library is loaded and usable
  bool amx = false;        // its effective ISA has the AMX tile units
  std::string library;     // the path dlopen was given
  std::string version;     // "3.2.0"
  std::string isa;         // oneDNN's effective ISA, e.g. "avx512_core_bf16"
  std::string reason;      // why it is not available
  std::string
      last_impl;  // this thread's last primitive, e.g. "brg:avx512_core"
  // Why this thread's last Gemm call returned false ("" when it ran the
  // product): "unavailable", "data type", "unimplemented" or the reference
  // implementation oneDNN offered (e.g. "ref:any"). Tests derive the path
  // they expect from it instead of guessing oneDNN's coverage per ISA.
  std::string declined;
};

// Loads the library on first use (never throws: a failure is the reason).
Info GetInfo();

// The libdnnl.so.3 to load ("" = the loader's search path). Drops the
// loaded state and the primitive cache, so the next call loads again: the
// package hands the wheel's path at import, tests a bad one.
void SetLibraryPath(const std::string& path);

// True when oneDNN is loaded and its effective ISA has at least AVX-512
// (avx512_core), the ISA its float32 kernels were measured on.
bool HasAvx512();

// True when oneDNN is loaded and its effective ISA has at least AVX2 (its
// float32 kernels measured faster than OpenBLAS on AMD Zen 3 too).
bool HasAvx2();

// True when oneDNN is loaded and its effective ISA has at least
// AVX512-BF16 (avx512_core_bf16; AMX ISAs include it), the ISA its
// bfloat16 kernels were measured on.
bool HasAvx512Bf16();

// out = alpha * a @ b (+ beta * c when layout.has_c and beta != 0) with a
// oneDNN matmul primitive, and true; false without touching out when oneDNN
// is unavailable or has no implementation for this dtype and layout (the
// caller then runs another path). Requires batch, m, n, k >= 1. Throws
// BackendError naming `op` when a oneDNN call fails otherwise.
bool Gemm(const char* op, const GemmLayout& layout, DataType dtype, float alpha,
          float beta, const void* a, const void* b, const void* c, void* out);

}  // namespace polyops::cpu::onednn

#endif  // POLYOPS_CPU_KERNELS_GEMM_ONEDNN_H_
