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
