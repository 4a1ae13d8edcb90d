#include "cpu/runtime/convert.h"

#include <cstdlib>
#include <cstring>

#include "core/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define POLYOPS_HAVE_F16C_PATH 1
#endif

namespace polyops::cpu {
namespace {

void HalfToFloatScalar(const Half* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = ToFloat(src[i]);
}

void FloatToHalfScalar(const float* src, Half* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = ToHalf(src[i]);
}

#ifdef POLYOPS_HAVE_F16C_PATH
// The hardware conversions round to nearest even like ToHalf, and handle
// subnormals, inf and nan identically.
__attribute__((target("avx,f16c"))) void HalfToFloatF16c(const Half* src,
                                                         float* dst,
                                                         int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i half8 =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(half8));
  }
  HalfToFloatScalar(src + i, dst + i, n - i);
}

__attribute__((target("avx,f16c"))) void FloatToHalfF16c(const float* src,
                                                         Half* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i half8 =
        _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), half8);
  }
  FloatToHalfScalar(src + i, dst + i, n - i);
}

bool HasF16c() {
  static const bool has =
      __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  return has;
}
#endif

}  // namespace

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
#ifdef POLYOPS_HAVE_F16C_PATH
  static const bool has = CpuIsaLimit() >= IsaLimit::kAvx2 &&
                          __builtin_cpu_supports("avx2") &&
                          __builtin_cpu_supports("fma") && HasF16c();
  return has;
#else
  return false;
#endif
}

bool HasAvx512() {
#ifdef POLYOPS_HAVE_F16C_PATH
  static const bool has =
      CpuIsaLimit() >= IsaLimit::kAvx512NoBf16 && HasAvx2() &&
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return has;
#else
  return false;
#endif
}

void HalfToFloat(const Half* src, float* dst, int64_t n) {
#ifdef POLYOPS_HAVE_F16C_PATH
  if (HasF16c()) return HalfToFloatF16c(src, dst, n);
#endif
  HalfToFloatScalar(src, dst, n);
}

void FloatToHalf(const float* src, Half* dst, int64_t n) {
#ifdef POLYOPS_HAVE_F16C_PATH
  if (HasF16c()) return FloatToHalfF16c(src, dst, n);
#endif
  FloatToHalfScalar(src, dst, n);
}

}  // namespace polyops::cpu
