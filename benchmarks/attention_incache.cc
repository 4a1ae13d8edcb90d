// In-cache roofline of the CPU attention tile kernel
// (src/cpu/kernels/attention/attention_tiles.h), one thread, per ISA variant (AVX-512, AVX2,
// baseline SSE2): the rate of its score and value products, of one unmasked row
// group (products + online softmax) and of the whole tile kernel on a T = 1024,
// 4-head, head size 128 prefill, each against the FMA and multiply + add peaks
// of that variant's vector width measured in the same run
// (benchmarks/attention.py gives the side-by-side ratios against SDPA; this
// says where the time goes). Thread CPU time, best of 5, so time other
// processes hold the core is not counted (cache and memory contention still
// is).
//
// Build and run (from the repository root; the flags are the library's):
//   g++ -std=c++17 -O3 -ffp-contract=off -fno-trapping-math -fno-math-errno \
//     -Wno-psabi -Isrc benchmarks/attention_incache.cc src/cpu/runtime/convert.cc \
//     -o build/attention_incache && build/attention_incache [avx512] [avx2]
//     [baseline]
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "cpu/kernels/attention/attention.h"

namespace {

using polyops::BFloat16;
using polyops::cpu::AccumulateValueRows;
using polyops::cpu::AttendRows;
using polyops::cpu::AttentionArgs;
using polyops::cpu::AttentionSequence;
using polyops::cpu::AttentionTile;
using polyops::cpu::Float16v;
using polyops::cpu::Float4v;
using polyops::cpu::Float8v;
using polyops::cpu::kAvx2Rows;
using polyops::cpu::kBaseRows;
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

// Multiply-adds per second of 12 independent chains of FMAs, or of
// multiplies feeding adds (what the kernel, built without contraction,
// runs), in vectors V (16, 8 or 4 floats: the zmm, ymm or xmm of each
// variant). Built for AVX-512; the 8- and 4-float chains compile to the
// same VEX instructions as the AVX2 (and, without FMA, SSE2) variants.
template <bool kFma, typename V>
__attribute__((target("avx512f,fma"), noinline)) double Peak(int64_t n) {
  V acc[12];
  for (V& a : acc) a = V{} + 1.0f;
  const V x = V{} + 1.0001f, y = V{} + 0.999f;
  const double t0 = ThreadSeconds();
  for (int64_t i = 0; i < n; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < 12; ++j) {
      if constexpr (kFma) {
        if constexpr (sizeof(V) == 64) {
          acc[j] = _mm512_fmadd_ps(acc[j], x, y);
        } else if constexpr (sizeof(V) == 32) {
          acc[j] = _mm256_fmadd_ps(acc[j], x, y);
        } else {
          acc[j] = _mm_fmadd_ps(acc[j], x, y);
        }
      } else {
        acc[j] = acc[j] * x + y;  // -ffp-contract=off: a multiply, an add
      }
    }
  }
  const double seconds = ThreadSeconds() - t0;
  float sink_value = 0.0f;
  for (const V& a : acc) sink_value += a[0];
  volatile float sink = sink_value;
  (void)sink;
  return n * 12.0 * (sizeof(V) / 4) / seconds / 1e9;
}

// The benchmark functions of one ISA variant: `Target` its target
// attribute, V its vector, kR its row group (AttendTiles##Name the library's
// entry point for it).
#define POLYOPS_INCACHE_VARIANT(Name, Target, V, kR)                           \
  Target __attribute__((noinline)) void Scores##Name(                          \
      const float* qs, const float* kt, float* s) {                            \
    for (int64_t i = 0; i < kReps; ++i) {                                      \
      for (int64_t r0 = 0; r0 + kR <= kRows; r0 += kR) {                       \
        ScoreRows<kR, V>(qs + r0 * kD, kD, kt, 0.1f,                           \
                         s + (r0 % 16) * kKeyTile);                            \
      }                                                                        \
    }                                                                          \
  }                                                                            \
  Target __attribute__((noinline)) void Values##Name(                          \
      float* acc, const float* p, const float* vs) {                           \
    float correction[16];                                                      \
    std::fill(correction, correction + 16, 1.0f);                              \
    for (int64_t i = 0; i < kReps; ++i) {                                      \
      for (int64_t r0 = 0; r0 + kR <= kRows; r0 += kR) {                       \
        AccumulateValueRows<kR, V>(acc + r0 * kD, kD, correction, p, vs,       \
                                   kKeyTile);                                  \
      }                                                                        \
    }                                                                          \
  }                                                                            \
  Target __attribute__((noinline)) void Rows##Name(                            \
      const float* qs, const float* kt, const float* vs, float* acc) {         \
    AttentionArgs<float> a{};                                                  \
    a.head_size = kD;                                                          \
    a.scale = 0.01f;                                                           \
    a.window_left = a.window_right = -1;                                       \
    AttentionSequence seq;                                                     \
    seq.q_len = seq.kv_len = 1 << 20;                                          \
    const AttentionTile tile{0, 0, kRows, 0, 1};                               \
    alignas(64) float s[kR * kKeyTile];                                        \
    alignas(64) Float16v row_sum[kRows] = {};                                  \
    float row_max[kRows];                                                      \
    std::fill(row_max, row_max + kRows, -1e30f);                               \
    const TileState state{row_max, row_sum, acc};                              \
    for (int64_t i = 0; i < kReps; ++i) {                                      \
      for (int64_t r0 = 0; r0 + kR <= kRows; r0 += kR) {                       \
        AttendRows<kR, kR, V>(a, seq, tile, r0, 0, kKeyTile, true, qs, kt, vs, \
                              s, state);                                       \
      }                                                                        \
    }                                                                          \
  }

POLYOPS_INCACHE_VARIANT(Avx512, POLYOPS_TARGET_AVX512, Float16v, 4)
POLYOPS_INCACHE_VARIANT(Avx2, POLYOPS_TARGET_AVX2, Float8v, kAvx2Rows)
POLYOPS_INCACHE_VARIANT(Base, , Float4v, kBaseRows)

// GFLOP/s (4 flops per visible query-key pair and head dim) of the whole
// tile kernel (`kernel`: AttendTilesAvx512<T> etc.) on one sequence of
// `tokens`, 4 heads of 128.
template <typename T, typename Kernel>
double Whole(Kernel kernel, int64_t tokens, bool causal) {
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
    kernel(a, sequences.data(), tiles.data(),
           static_cast<int64_t>(tiles.size()));
  });
  const double pairs =
      causal ? tokens * (tokens + 1) / 2.0 : double(tokens) * tokens;
  return 4.0 * heads * pairs * kD / seconds / 1e9;
}

struct Variant {
  const char* name;
  double fma_peak, mul_add_peak;  // GMAC/s
  void (*scores)(const float*, const float*, float*);
  void (*values)(float*, const float*, const float*);
  void (*rows)(const float*, const float*, const float*, float*);
  decltype(&polyops::cpu::AttendTilesAvx512<float>) whole_f32;
  decltype(&polyops::cpu::AttendTilesAvx512<BFloat16>) whole_bf16;
};

void Report(const Variant& variant, int64_t row_group) {
  const double peak = std::max(variant.fma_peak, variant.mul_add_peak);
  std::printf(
      "\n== %s: peak of 12 chains, FMA %.1f GMAC/s, mul + add %.1f GMAC/s"
      " (percentages below: of the FMA peak)\n",
      variant.name, variant.fma_peak, variant.mul_add_peak);
  std::vector<float> qs(kRows * kD, 0.01f), kt(kD * kKeyTile, 0.02f);
  std::vector<float> s(32 * kKeyTile, -1.0f);
  std::vector<float> acc(kRows * kD),
      vs(kKeyTile * polyops::cpu::ValueStride(kD), 0.3f);
  // One unit: one query row against one 64-key piece, kKeyTile * kD
  // multiply-adds for the scores and as many for the values.
  const double units = double(kReps) * kRows;
  const double macs = kKeyTile * kD;
  const double score =
      Best([&] { variant.scores(qs.data(), kt.data(), s.data()); });
  const double value =
      Best([&] { variant.values(acc.data(), s.data(), vs.data()); });
  const double rows =
      Best([&] { variant.rows(qs.data(), kt.data(), vs.data(), acc.data()); });
  auto line = [&](const char* what, double seconds, double per_unit_macs) {
    const double rate = units * per_unit_macs / seconds / 1e9;
    std::printf("%-46s %7.1f ns/unit %6.1f GMAC/s %4.0f %% of peak\n", what,
                seconds / units * 1e9, rate, 100 * rate / peak);
  };
  char label[3][64];
  std::snprintf(label[0], 64, "scores (ScoreRows<%ld>, 64 keys x 128 dims)",
                static_cast<long>(row_group));
  std::snprintf(label[1], 64, "values (AccumulateValueRows<%ld>)",
                static_cast<long>(row_group));
  std::snprintf(label[2], 64, "scores + softmax + values (AttendRows<%ld>)",
                static_cast<long>(row_group));
  line(label[0], score, macs);
  line(label[1], value, macs);
  line(label[2], rows, 2 * macs);
  std::printf("softmax and masks: ~%.1f ns/unit\n",
              (rows - score - value) / units * 1e9);
  for (bool causal : {false, true}) {
    const double f = Whole<float>(variant.whole_f32, 1024, causal);
    const double b = Whole<BFloat16>(variant.whole_bf16, 1024, causal);
    std::printf(
        "tile kernel T1024 x 4 heads, causal %d: float32 %.1f GFLOP/s"
        " (%.0f %% of peak), bfloat16 %.1f GFLOP/s (%.0f %%)\n",
        causal, f, 100 * f / 2 / peak, b, 100 * b / 2 / peak);
  }
}

}  // namespace

// Arguments: the variants to run (avx512 avx2 baseline; default avx512
// avx2).
int main(int argc, char** argv) {
  using polyops::cpu::Float4v;
  using polyops::cpu::Float8v;
  const bool avx512 = polyops::cpu::HasAvx512();
  std::vector<std::string> names(argv + 1, argv + argc);
  if (names.empty()) {
    names = avx512 ? std::vector<std::string>{"avx512", "avx2"}
                   : std::vector<std::string>{"avx2"};
  }
  constexpr int64_t kN = 20000000;
  for (const std::string& name : names) {
    if ((name == "avx512" && !avx512) ||
        (name == "avx2" && !polyops::cpu::HasAvx2())) {
      std::printf("this CPU cannot run the %s variant\n", name.c_str());
      return 1;
    }
    if (name == "avx512") {
      Report({"AVX-512 (Float16v = 1 zmm)", Peak<true, __m512>(kN),
              Peak<false, __m512>(kN), ScoresAvx512, ValuesAvx512, RowsAvx512,
              polyops::cpu::AttendTilesAvx512<float>,
              polyops::cpu::AttendTilesAvx512<BFloat16>},
             4);
    } else if (name == "avx2") {
      Report({"AVX2 (Float8v = 1 ymm)", Peak<true, __m256>(kN),
              Peak<false, __m256>(kN), ScoresAvx2, ValuesAvx2, RowsAvx2,
              polyops::cpu::AttendTilesAvx2<float>,
              polyops::cpu::AttendTilesAvx2<BFloat16>},
             polyops::cpu::kAvx2Rows);
    } else if (name == "baseline") {
      Report({"baseline SSE2 (Float4v = 1 xmm)", Peak<true, __m128>(kN),
              Peak<false, __m128>(kN), ScoresBase, ValuesBase, RowsBase,
              polyops::cpu::AttendTilesBase<float>,
              polyops::cpu::AttendTilesBase<BFloat16>},
             polyops::cpu::kBaseRows);
    } else {
      std::printf("unknown variant %s (avx512, avx2, baseline)\n",
                  name.c_str());
      return 1;
    }
  }
  return 0;
}
