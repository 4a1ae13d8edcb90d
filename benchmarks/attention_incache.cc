// In-cache roofline of the CPU attention tile kernel (src/cpu/attention.h),
// one thread, AVX-512 variant: the rate of its score and value products, of
// one unmasked row group (products + online softmax) and of the whole tile
// kernel on a T = 1024, 4-head, head size 128 prefill, each against the
// measured 512-bit FMA and multiply + add peaks (benchmarks/attention.py
// gives the side-by-side ratios against SDPA; this says where the time
// goes). Thread CPU time, best of 5, so time other processes hold the core
// is not counted.
//
// Build and run (from the repository root; the flags are the library's):
//   g++ -std=c++17 -O3 -ffp-contract=off -fno-trapping-math -fno-math-errno \
//     -Isrc benchmarks/attention_incache.cc src/cpu/convert.cc \
//     -o build/attention_incache && build/attention_incache
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <random>
#include <vector>

#include "cpu/attention.h"

namespace {

using polyops::BFloat16;
using polyops::cpu::AccumulateValueRows;
using polyops::cpu::AttendRows;
using polyops::cpu::AttendTilesAvx512;
using polyops::cpu::AttentionArgs;
using polyops::cpu::AttentionSequence;
using polyops::cpu::AttentionTile;
using polyops::cpu::Float16v;
using polyops::cpu::kKeyTile;
using polyops::cpu::ScoreRows;
using polyops::cpu::TileState;

constexpr int64_t kD = 128;     // head size
constexpr int64_t kRows = 128;  // rows of a tile at head size 128
constexpr int64_t kReps = 2000;

double ThreadSeconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

template <typename F>
double Best(F&& f) {
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const double t0 = ThreadSeconds();
    f();
    best = std::min(best, ThreadSeconds() - t0);
  }
  return best;
}

// Multiply-adds per second of 12 independent chains of 512-bit FMAs, or of
// multiplies feeding adds (what the kernel, built without contraction, runs).
template <bool kFma>
__attribute__((target("avx512f,fma"), noinline)) double Peak(int64_t n) {
  __m512 acc[12];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  const __m512 x = _mm512_set1_ps(1.0001f), y = _mm512_set1_ps(0.999f);
  const double t0 = ThreadSeconds();
  for (int64_t i = 0; i < n; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < 12; ++j) {
      acc[j] = kFma ? _mm512_fmadd_ps(acc[j], x, y)
                    : _mm512_add_ps(_mm512_mul_ps(acc[j], x), y);
    }
  }
  const double seconds = ThreadSeconds() - t0;
  __m512 sum = acc[0];
  for (int j = 1; j < 12; ++j) sum = _mm512_add_ps(sum, acc[j]);
  volatile float sink = _mm512_reduce_add_ps(sum);
  (void)sink;
  return n * 12.0 * 16.0 / seconds;
}

POLYOPS_TARGET_AVX512 __attribute__((noinline)) void Scores(const float* qs,
                                                            const float* kt,
                                                            float* s) {
  for (int64_t i = 0; i < kReps; ++i) {
    for (int64_t r0 = 0; r0 < kRows; r0 += 4) {
      ScoreRows<4>(qs + r0 * kD, kD, kt, 0.1f, s + (r0 % 16) * kKeyTile);
    }
  }
}

POLYOPS_TARGET_AVX512 __attribute__((noinline)) void Values(float* acc,
                                                            const float* p,
                                                            const float* vs) {
  const float correction[4] = {1.0f, 1.0f, 1.0f, 1.0f};
  for (int64_t i = 0; i < kReps; ++i) {
    for (int64_t r0 = 0; r0 < kRows; r0 += 4) {
      AccumulateValueRows<4>(acc + r0 * kD, kD, correction, p, vs, kKeyTile);
    }
  }
}

POLYOPS_TARGET_AVX512 __attribute__((noinline)) void Rows(const float* qs,
                                                          const float* kt,
                                                          const float* vs,
                                                          float* acc) {
  AttentionArgs<float> a{};
  a.head_size = kD;
  a.scale = 0.01f;
  a.window_left = a.window_right = -1;
  AttentionSequence seq;
  seq.q_len = seq.kv_len = 1 << 20;
  const AttentionTile tile{0, 0, kRows, 0, 1};
  alignas(64) float s[4 * kKeyTile];
  alignas(64) Float16v row_sum[kRows] = {};
  float row_max[kRows];
  std::fill(row_max, row_max + kRows, -1e30f);
  const TileState state{row_max, row_sum, acc};
  for (int64_t i = 0; i < kReps; ++i) {
    for (int64_t r0 = 0; r0 < kRows; r0 += 4) {
      AttendRows<4, 4>(a, seq, tile, r0, 0, kKeyTile, true, qs, kt, vs, s,
                       state);
    }
  }
}

// GFLOP/s (4 flops per visible query-key pair and head dim) of the whole
// tile kernel on one sequence of `tokens`, 4 heads of 128.
template <typename T>
double Whole(int64_t tokens, bool causal) {
  const int64_t heads = 4;
  const int64_t n = tokens * heads * kD;
  std::vector<T> q(n), k(n), v(n), o(n);
  std::mt19937 gen(1);
  std::normal_distribution<float> normal;
  for (std::vector<T>* x : {&q, &k, &v}) {
    for (T& e : *x) {
      if constexpr (std::is_same_v<T, float>) {
        e = normal(gen);
      } else {
        e = polyops::ToBFloat16(normal(gen));
      }
    }
  }
  const int64_t stride = heads * kD;
  const AttentionArgs<T> a{q.data(), stride, kD,     o.data(), stride,   kD,
                           k.data(), 0,      stride, kD,       v.data(), 0,
                           stride,   kD,     kD,     1,        0,        0.088f,
                           causal,   -1,     -1};
  std::vector<AttentionSequence> sequences(1);
  sequences[0].q_len = sequences[0].kv_len = tokens;
  std::vector<AttentionTile> tiles;
  polyops::cpu::AppendTiles(sequences[0], 0, heads, 1, kD, &tiles);
  const double seconds = Best([&] {
    AttendTilesAvx512<T>(a, sequences.data(), tiles.data(),
                         static_cast<int64_t>(tiles.size()));
  });
  const double pairs =
      causal ? tokens * (tokens + 1) / 2.0 : double(tokens) * tokens;
  return 4.0 * heads * pairs * kD / seconds / 1e9;
}

}  // namespace

int main() {
  if (!polyops::cpu::HasAvx512()) {
    std::printf("needs AVX-512 (F, BW, VL, DQ)\n");
    return 1;
  }
  const double fma = Peak<true>(20000000) / 1e9;
  const double mul_add = Peak<false>(20000000) / 1e9;
  const double peak = std::max(fma, mul_add);
  std::printf(
      "peak, 12 chains of 512-bit ops: FMA %.1f GMAC/s, mul + add %.1f"
      " GMAC/s\n",
      fma, mul_add);
  std::vector<float> qs(kRows * kD, 0.01f), kt(kD * kKeyTile, 0.02f);
  std::vector<float> s(16 * kKeyTile + 4 * kKeyTile, -1.0f);
  std::vector<float> acc(kRows * kD), vs(kKeyTile * kD, 0.3f);
  // One unit: one query row against one 64-key piece, kKeyTile * kD
  // multiply-adds for the scores and as many for the values.
  const double units = double(kReps) * kRows;
  const double macs = kKeyTile * kD;
  const double score = Best([&] { Scores(qs.data(), kt.data(), s.data()); });
  const double value = Best([&] { Values(acc.data(), s.data(), vs.data()); });
  const double rows =
      Best([&] { Rows(qs.data(), kt.data(), vs.data(), acc.data()); });
  auto line = [&](const char* what, double seconds, double per_unit_macs) {
    const double rate = units * per_unit_macs / seconds / 1e9;
    std::printf("%-44s %7.1f ns/unit %6.1f GMAC/s %4.0f %% of peak\n", what,
                seconds / units * 1e9, rate, 100 * rate / peak);
  };
  line("scores (ScoreRows<4>, 64 keys x 128 dims)", score, macs);
  line("values (AccumulateValueRows<4>)", value, macs);
  line("scores + softmax + values (AttendRows<4, 4>)", rows, 2 * macs);
  std::printf("softmax and masks: ~%.1f ns/unit\n",
              (rows - score - value) / units * 1e9);
  for (bool causal : {false, true}) {
    const double f = Whole<float>(1024, causal);
    const double b = Whole<BFloat16>(1024, causal);
    std::printf(
        "tile kernel T1024 x 4 heads, causal %d: float32 %.1f GFLOP/s"
        " (%.0f %% of peak), bfloat16 %.1f GFLOP/s (%.0f %%)\n",
        causal, f, 100 * f / 2 / peak, b, 100 * b / 2 / peak);
  }
  return 0;
}
