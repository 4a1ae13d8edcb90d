#include "cpu/runtime/isa.h"

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace polyops::cpu {

IsaLimit CpuIsaLimit() {
  // A throw leaves the static uninitialized: every later call throws again.
  static const IsaLimit limit = [] {
    const char* value = std::getenv("POLYOPS_CPU_ISA");
    if (value == nullptr || *value == '\0') return IsaLimit::kNone;
    if (std::strcmp(value, "baseline") == 0) return IsaLimit::kBaseline;
    if (std::strcmp(value, "avx2") == 0) return IsaLimit::kAvx2;
    if (std::strcmp(value, "avx512") == 0) return IsaLimit::kAvx512NoBf16;
    throw InvalidArgument(detail::Concat(
        "environment variable POLYOPS_CPU_ISA must be baseline, avx2 or avx512 "
        "(or unset: the CPU's own best), got '",
        value, "'"));
  }();
  return limit;
}

bool HasAvx2() {
#if defined(__x86_64__)
  static const bool has =
      CpuIsaLimit() >= IsaLimit::kAvx2 && __builtin_cpu_supports("avx2") &&
      __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  return has;
#else
  return false;
#endif
}

bool HasAvx512() {
#if defined(__x86_64__)
  static const bool has =
      CpuIsaLimit() >= IsaLimit::kAvx512NoBf16 && HasAvx2() &&
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return has;
#else
  return false;
#endif
}

bool HasAvx512Bf16() {
#if defined(__x86_64__)
  // POLYOPS_CPU_ISA=avx512 drops it: tests run the integer rounding path.
  static const bool has = HasAvx512() && __builtin_cpu_supports("avx512bf16") &&
                          CpuIsaLimit() == IsaLimit::kNone;
  return has;
#else
  return false;
#endif
}

}  // namespace polyops::cpu
