// The AVX-512 packed products of KernelGemm (more than kSmallM rows, both
// dtypes): b packed once per column strip into the layout the micro-kernel
// streams, a read in place (row-major: one row's k run is contiguous, and a
// bfloat16 pair of it is one 32-bit broadcast), kMr x kNr output tiles held
// in 24 accumulators.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/data_type.h"
#include "core/gemm_layout.h"
#include "cpu/kernels/gemm/gemm_kernels_avx512.h"
#include "cpu/kernels/gemm/gemm_orient.h"
#include "cpu/runtime/parallel.h"

namespace polyops::cpu {
namespace {

// Packed b is made of 32-bit units: a (b[2s][j], b[2s + 1][j]) bfloat16 pair,
// the operand layout of vdpbf16ps, or one float32 b[s][j]. A panel is kNr
// columns; its step s (kUnitK values of k) is kNr consecutive units, so the
// kernel loads kPackNv vectors per step and broadcasts one unit of each row
// of a against them: kMr * kPackNv vdpbf16ps / FMA per kPackNv + kMr loads
// (the broadcasts fold into the instructions), none of them a reduction.
constexpr int kMr = 12;
// Most steps of k per pass. A tile's sums stay in registers for a whole
// pass, so k is split only when it is long: each pass ends in a round trip
// of the 24 accumulators through the float32 block, which at 128 steps per
// pass (a panel's pass in L1) cost ~7 % of the time at 1024^3. A pass of
// 2048 steps reads its panel (up to 256 KiB) from L2, which keeps up: one
// 128-byte step per kMr * kPackNv instructions.
constexpr int64_t kMaxStepsPerPass = 2048;
// Columns per strip (one task; its packed b, all of k, stays in L2/L3) and
// rows per block (the float32 sums of a block, kMcMax x kNc, stay in L2).
constexpr int64_t kNc = 256;
constexpr int64_t kMcMax = 192;

template <typename E>
inline constexpr int64_t kUnitK = std::is_same_v<E, float> ? 1 : 2;

// dst tile (MR x kNr float32, rows ld_dst apart) (+)= a[0:MR, 0:steps *
// kUnitK] @ packed panel; for bfloat16, `half` adds one more k (the odd
// last one: its unit's second value is zero in b and not read from a).
template <typename E, int MR>
POLYOPS_TARGET_GEMM void PackedTile(const E* a, int64_t lda, const uint32_t* b,
                                    int64_t steps, bool half, float* dst,
                                    int64_t ld_dst, bool accumulate) {
  __m512 acc[MR][kPackNv];
  for (int i = 0; i < MR; ++i) {
    for (int v = 0; v < kPackNv; ++v) acc[i][v] = _mm512_setzero_ps();
  }
  const auto step = [&](int64_t s, int bytes) POLYOPS_TARGET_GEMM {
    const uint32_t* bs = b + s * kNr;
    if constexpr (std::is_same_v<E, float>) {
      __m512 bv[kPackNv];
      for (int v = 0; v < kPackNv; ++v) bv[v] = _mm512_loadu_ps(bs + 16 * v);
      for (int i = 0; i < MR; ++i) {
        const __m512 av = _mm512_set1_ps(a[i * lda + s]);
        for (int v = 0; v < kPackNv; ++v) {
          acc[i][v] = _mm512_fmadd_ps(av, bv[v], acc[i][v]);
        }
      }
    } else {
      __m512bh bv[kPackNv];
      for (int v = 0; v < kPackNv; ++v) {
        bv[v] = (__m512bh)_mm512_loadu_si512(bs + 16 * v);
      }
      for (int i = 0; i < MR; ++i) {
        uint32_t pair = 0;
        std::memcpy(&pair, a + i * lda + 2 * s, bytes);
        const __m512bh av = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair));
        for (int v = 0; v < kPackNv; ++v) {
          acc[i][v] = _mm512_dpbf16_ps(acc[i][v], av, bv[v]);
        }
      }
    }
  };
  for (int64_t s = 0; s < steps; ++s) step(s, 4);
  if constexpr (!std::is_same_v<E, float>) {
    if (half) step(steps, 2);
  }
  StoreTile<MR, kPackNv>(acc, dst, ld_dst, accumulate);
}

template <typename E>
using PackedFn = void (*)(const E*, int64_t, const uint32_t*, int64_t, bool,
                          float*, int64_t, bool);

template <typename E, int... I>
constexpr std::array<PackedFn<E>, sizeof...(I)> MakePackedTable(
    std::integer_sequence<int, I...>) {
  return {&PackedTile<E, I + 1>...};
}

// Columns [j0, j0 + cols) of matrix bi of b, all of k, packed as panels
// (see above); columns past `cols` and the second value of an odd last k
// are zero.
template <typename E>
POLYOPS_TARGET_GEMM void PackStrip(const Oriented<E>& o, int64_t bi, int64_t j0,
                                   int64_t cols, int64_t steps, uint32_t* dst) {
  constexpr int64_t kK = kUnitK<E>;
  const E* b = o.b + bi * o.b_batch;
  const int64_t full_steps = o.k / kK;  // steps with every k present
  for (int64_t c0 = 0; c0 < cols; c0 += kNr) {
    const int64_t valid = std::min(kNr, cols - c0);
    uint32_t* panel = dst + c0 / kNr * steps * kNr;
    if (o.b_col_major) {
      // Column j's units are contiguous (k runs along the column): a
      // transpose, one 16-column gather per vector (scale: element bytes;
      // the index j * ldb fits 32 bits, see KernelGemm).
      for (int v = 0; v < kPackNv; ++v) {
        const int lanes =
            static_cast<int>(std::clamp<int64_t>(valid - 16 * v, 0, 16));
        const __mmask16 mask = static_cast<__mmask16>((1u << lanes) - 1);
        const __m512i idx =
            _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7,
                                                6, 5, 4, 3, 2, 1, 0),
                               _mm512_set1_epi32(static_cast<int>(o.ldb)));
        const E* col = b + (j0 + c0 + 16 * v) * o.ldb;
        for (int64_t s = 0; s < full_steps; ++s) {
          __m512i units = _mm512_setzero_si512();
          if (lanes > 0) {
            units = _mm512_mask_i32gather_epi32(units, mask, idx, col + kK * s,
                                                sizeof(E));
          }
          _mm512_storeu_si512(panel + s * kNr + 16 * v, units);
        }
        if (full_steps < steps) {
          for (int j = 0; j < 16; ++j) {
            uint16_t last = 0;
            if (j < lanes) std::memcpy(&last, col + j * o.ldb + o.k - 1, 2);
            panel[full_steps * kNr + 16 * v + j] = last;
          }
        }
      }
      continue;
    }
    // Row-major b: rows of the strip are contiguous.
    for (int64_t s = 0; s < steps; ++s) {
      if constexpr (std::is_same_v<E, float>) {
        for (int v = 0; v < kPackNv; ++v) {
          const int lanes =
              static_cast<int>(std::clamp<int64_t>(valid - 16 * v, 0, 16));
          const __m512 x =
              _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << lanes) - 1),
                                    b + s * o.ldb + j0 + c0 + 16 * v);
          _mm512_storeu_ps(panel + s * kNr + 16 * v, x);
        }
      } else {
        // Two rows interleaved into pairs.
        const __m512i idx_lo = _mm512_load_si512(kInterleaveLo);
        const __m512i idx_hi = _mm512_load_si512(kInterleaveHi);
        for (int ch = 0; ch < kPackNv / 2; ++ch) {
          const int lanes =
              static_cast<int>(std::clamp<int64_t>(valid - 32 * ch, 0, 32));
          const __mmask32 mask = static_cast<__mmask32>((1ull << lanes) - 1);
          const E* row = b + 2 * s * o.ldb + j0 + c0 + 32 * ch;
          const __m512i x = _mm512_maskz_loadu_epi16(mask, row);
          const __m512i y = 2 * s + 1 < o.k
                                ? _mm512_maskz_loadu_epi16(mask, row + o.ldb)
                                : _mm512_setzero_si512();
          _mm512_storeu_si512(panel + s * kNr + 32 * ch,
                              _mm512_permutex2var_epi16(x, idx_lo, y));
          _mm512_storeu_si512(panel + s * kNr + 32 * ch + 16,
                              _mm512_permutex2var_epi16(x, idx_hi, y));
        }
      }
    }
  }
}

}  // namespace

template <typename T, typename E>
void RunPacked(const Oriented<E>& o, const GemmMatrix& out_m,
               const GemmMatrix& c_m, float alpha, float beta, const T* c,
               T* out) {
  static_assert(kPackNv % 2 == 0, "bfloat16 packs 32 columns per load");
  static constexpr auto kTable =
      MakePackedTable<E>(std::make_integer_sequence<int, kMr>());
  constexpr int64_t kK = kUnitK<E>;
  const int64_t steps = (o.k + kK - 1) / kK;
  // Passes of equal length (the last may hold the odd k of bfloat16).
  const int64_t passes = (steps + kMaxStepsPerPass - 1) / kMaxStepsPerPass;
  const int64_t pass_steps = (steps + passes - 1) / passes;
  const int64_t n_blocks = (o.n + kNc - 1) / kNc;
  // Row blocks of equal size (whole tiles), at most kMcMax rows.
  const int64_t m_blocks = (o.m + kMcMax - 1) / kMcMax;
  const int64_t mc = RoundUp((o.m + m_blocks - 1) / m_blocks, kMr);
  const double work = static_cast<double>(o.batch) * o.m * o.n * o.k;
  ParallelFor(o.batch * n_blocks, work >= kParallelGemmWork, [&](int64_t t) {
    const int64_t bi = t / n_blocks;
    const int64_t j0 = t % n_blocks * kNc;
    const int64_t cols = std::min(kNc, o.n - j0);
    const int64_t panels = (cols + kNr - 1) / kNr;
    thread_local std::vector<uint32_t> packed;
    packed.resize(static_cast<size_t>(panels * steps * kNr));
    PackStrip(o, bi, j0, cols, steps, packed.data());
    const int64_t pitch = panels * kNr;
    thread_local std::vector<float> block;
    block.resize(static_cast<size_t>(mc * pitch));
    const T* c_mat = c == nullptr ? nullptr : c + bi * c_m.batch_stride;
    T* out_mat = out + bi * out_m.batch_stride;
    for (int64_t i0 = 0; i0 < o.m; i0 += mc) {
      const int64_t rows = std::min(mc, o.m - i0);
      const E* a = o.a + bi * o.a_batch + i0 * o.lda;
      for (int64_t s0 = 0; s0 < steps; s0 += pass_steps) {
        const int64_t pass_k = std::min(pass_steps * kK, o.k - s0 * kK);
        const bool last = s0 + pass_steps >= steps;
        for (int64_t pj = 0; pj < panels; ++pj) {
          const uint32_t* bp = packed.data() + (pj * steps + s0) * kNr;
          for (int64_t ir = 0; ir < rows; ir += kMr) {
            const int64_t mr = std::min<int64_t>(kMr, rows - ir);
            float* dst = block.data() + ir * pitch + pj * kNr;
            kTable[mr - 1](a + ir * o.lda + s0 * kK, o.lda, bp, pass_k / kK,
                           pass_k % kK != 0, dst, pitch, s0 > 0);
            if (!last) continue;
            // The tile's final sums, still in L1: scaled, given beta * c
            // and rounded into out.
            const int64_t j = j0 + pj * kNr;
            const int64_t width = std::min(kNr, o.n - j);
            for (int64_t r = 0; r < mr; ++r) {
              const int64_t i = i0 + ir + r;
              FinishRow(dst + r * pitch, width, alpha, beta,
                        c_mat == nullptr
                            ? nullptr
                            : c_mat + i * c_m.row_stride + j * c_m.col_stride,
                        c_m.col_stride,
                        out_mat + i * out_m.row_stride + j * out_m.col_stride,
                        out_m.col_stride);
            }
          }
        }
      }
    }
  });
}

template void RunPacked<BFloat16, uint16_t>(const Oriented<uint16_t>&,
                                            const GemmMatrix&,
                                            const GemmMatrix&, float, float,
                                            const BFloat16*, BFloat16*);
template void RunPacked<float, float>(const Oriented<float>&, const GemmMatrix&,
                                      const GemmMatrix&, float, float,
                                      const float*, float*);

}  // namespace polyops::cpu
