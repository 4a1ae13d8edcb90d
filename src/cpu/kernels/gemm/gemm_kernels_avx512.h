// Shared by the AVX-512 matrix-product kernels of KernelGemm
// (gemm_kernels.h): the decode kernels (gemm_kernels_decode.cc, m <=
// kSmallM, b read in place) and the packed ones (gemm_kernels_packed.cc).
// Both finish a float32 block of sums the same way, and both interleave
// bfloat16 rows into the pairs vdpbf16ps reads.
#ifndef POLYOPS_CPU_KERNELS_GEMM_GEMM_KERNELS_AVX512_H_
#define POLYOPS_CPU_KERNELS_GEMM_GEMM_KERNELS_AVX512_H_

// GCC 12's _mm512_undefined_ps (inside the unpack intrinsics) reads an
// uninitialized variable on purpose and then warns about it.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/gemm_layout.h"
#include "cpu/kernels/gemm/gemm_orient.h"
#include "cpu/runtime/convert.h"

// One target for every kernel here. The float32 kernels use only AVX-512F
// intrinsics (GCC emits AVX512-BF16 instructions only for its intrinsics),
// so they run on any CPU with AVX-512; the bfloat16 ones also need
// AVX512-BF16. Both are chosen at run time by CPUID (HasAvx512,
// HasAvx512Bf16 of cpu/runtime/isa.h, which POLYOPS_CPU_ISA caps),
// as the other ISA variants are.
#define POLYOPS_TARGET_GEMM \
  __attribute__((           \
      target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c")))

namespace polyops::cpu {

// Columns of one packed panel: kPackNv vectors of 16 (see
// gemm_kernels_packed.cc). KernelGemm also needs it, to refuse leading
// dimensions the packed path's 32-bit gather indices cannot hold.
inline constexpr int kPackNv = 2;
inline constexpr int64_t kNr = 16 * kPackNv;

// acc rows (16 * NV float columns each) into dst rows, added when
// `accumulate`. dst rows are padded to whole tiles (pitch: see RunBlocked).
template <int MR, int NV>
POLYOPS_TARGET_GEMM POLYOPS_INLINE void StoreTile(const __m512 (&acc)[MR][NV],
                                                  float* dst, int64_t ld_dst,
                                                  bool accumulate) {
  for (int i = 0; i < MR; ++i) {
    for (int v = 0; v < NV; ++v) {
      float* d = dst + i * ld_dst + 16 * v;
      __m512 value = acc[i][v];
      if (accumulate) value = _mm512_add_ps(value, _mm512_loadu_ps(d));
      _mm512_storeu_ps(d, value);
    }
  }
}

// Up to 16 values of a T row (element stride `stride`) as float32; lanes
// past `mask` are zero.
template <typename T>
POLYOPS_TARGET_GEMM POLYOPS_INLINE __m512 LoadLanes(const T* src,
                                                    int64_t stride,
                                                    __mmask16 mask, int n) {
  if (stride == 1) {
    if constexpr (std::is_same_v<T, float>) {
      return _mm512_maskz_loadu_ps(mask, src);
    } else {
      const __m256i bits = _mm256_maskz_loadu_epi16(mask, src);
      return _mm512_castsi512_ps(
          _mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
    }
  }
  if (stride == 0) return _mm512_maskz_mov_ps(mask, _mm512_set1_ps(Load(src)));
  alignas(64) float values[16] = {};
  for (int t = 0; t < n; ++t) values[t] = Load(src + t * stride);
  return _mm512_load_ps(values);
}

// The first n lanes of v stored into a T row (element stride `stride`),
// rounded as Store rounds (bfloat16: to nearest even, NaN kept quiet).
template <typename T>
POLYOPS_TARGET_GEMM POLYOPS_INLINE void StoreLanes(__m512 v, T* dst,
                                                   int64_t stride,
                                                   __mmask16 mask, int n) {
  if (stride == 1) {
    if constexpr (std::is_same_v<T, float>) {
      _mm512_mask_storeu_ps(dst, mask, v);
    } else {
      const __m512i bits = _mm512_castps_si512(v);
      const __m512i one = _mm512_set1_epi32(1);
      const __m512i rounded =
          _mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)),
                           _mm512_and_si512(_mm512_srli_epi32(bits, 16), one));
      const __mmask16 nan = _mm512_cmpgt_epu32_mask(
          _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)),
          _mm512_set1_epi32(0x7f800000));
      const __m512i quiet = _mm512_or_si512(bits, _mm512_set1_epi32(0x400000));
      const __m512i chosen = _mm512_mask_mov_epi32(rounded, nan, quiet);
      _mm256_mask_storeu_epi16(
          dst, mask, _mm512_cvtepi32_epi16(_mm512_srli_epi32(chosen, 16)));
    }
    return;
  }
  alignas(64) float values[16];
  _mm512_store_ps(values, v);
  for (int t = 0; t < n; ++t) Store(dst + t * stride, values[t]);
}

// out[0:n] = alpha * sums[0:n] (+ beta * c[0:n] when c is given), rounded
// once to T; c and out have element strides (c's may be 0: a bias).
template <typename T>
POLYOPS_TARGET_GEMM void FinishRow(const float* sums, int64_t n, float alpha,
                                   float beta, const T* c, int64_t c_stride,
                                   T* out, int64_t out_stride) {
  const __m512 alpha_v = _mm512_set1_ps(alpha);
  const __m512 beta_v = _mm512_set1_ps(beta);
  for (int64_t j = 0; j < n; j += 16) {
    const int lanes = static_cast<int>(std::min<int64_t>(16, n - j));
    const __mmask16 mask = static_cast<__mmask16>((1u << lanes) - 1);
    __m512 v = _mm512_maskz_loadu_ps(mask, sums + j);
    if (alpha != 1.0f) v = _mm512_mul_ps(v, alpha_v);
    if (c != nullptr) {
      const __m512 cv = LoadLanes(c + j * c_stride, c_stride, mask, lanes);
      v = _mm512_add_ps(v, _mm512_mul_ps(beta_v, cv));
    }
    StoreLanes(v, out + j * out_stride, out_stride, mask, lanes);
  }
}

// VPERMT2W indices that interleave two rows x, y of 32 bfloat16 into the
// pairs vdpbf16ps reads: element 2t of the low result is x[t], 2t + 1 is
// y[t]; the high result does the same for t + 16.
alignas(64) inline constexpr uint16_t kInterleaveLo[32] = {
    0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
    8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
alignas(64) inline constexpr uint16_t kInterleaveHi[32] = {
    16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
    24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};

// out = alpha * a @ b (+ beta * c) for an oriented product, T the storage
// type (float or BFloat16) and E its element bits (float or uint16_t).
// RunBlocked: m <= kSmallM (decode), b read in place. RunPacked: larger m,
// b packed per column strip.
template <typename T, typename E>
void RunBlocked(const Oriented<E>& o, const GemmMatrix& out_m,
                const GemmMatrix& c_m, float alpha, float beta, const T* c,
                T* out);
template <typename T, typename E>
void RunPacked(const Oriented<E>& o, const GemmMatrix& out_m,
               const GemmMatrix& c_m, float alpha, float beta, const T* c,
               T* out);

}  // namespace polyops::cpu

#endif  // POLYOPS_CPU_KERNELS_GEMM_GEMM_KERNELS_AVX512_H_
