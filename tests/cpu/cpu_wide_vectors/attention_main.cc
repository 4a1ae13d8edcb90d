// The CPU attention tile kernel's AVX-512 instantiation (AttendTiles<4, 4,
// Float16v>, src/cpu/kernels/attention/attention.h) run on any x86-64: its
// vectors are GCC vector extensions, so the same template compiled without the
// AVX-512 target runs with each Float16v lowered to xmm / ymm registers,
// executing the instantiation's own blocking, masking and tail logic. Each case
// must give the bits of the baseline and AVX2 variants (and of the real AVX-512
// variant where the CPU has it) and stay within a float64 reference's
// tolerance. tests/cpu/test_cpu_wide_vectors.py builds and runs it; it prints
// one line per dtype and a summary, and exits 1 on any difference.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cpu/kernels/attention/attention.h"

namespace polyops::cpu {

// The AVX-512 variant's template arguments, compiled for the baseline and
// for AVX2 (the ISA only picks the registers the Float16v lives in).
template <typename T>
void AttendTilesWideBase(const AttentionArgs<T>& a,
                         const AttentionSequence* sequences,
                         const AttentionTile* tiles, int64_t count) {
  AttendTiles<4, 4, Float16v>(a, sequences, tiles, count);
}

template <typename T>
POLYOPS_TARGET_AVX2 void AttendTilesWideAvx2(const AttentionArgs<T>& a,
                                             const AttentionSequence* sequences,
                                             const AttentionTile* tiles,
                                             int64_t count) {
  AttendTiles<4, 4, Float16v>(a, sequences, tiles, count);
}

}  // namespace polyops::cpu

namespace {

using polyops::BFloat16;
using polyops::Half;
namespace cpu = polyops::cpu;

struct Shape {
  int64_t heads, kv_heads, head_size;
  bool causal;
  int64_t window_left, window_right;
  int64_t block_size;  // 0: contiguous kv
  std::vector<int64_t> q_lens, kv_lens;
  bool specials;  // NaN / inf in the inputs
};

template <typename T>
const char* Name() {
  if constexpr (std::is_same_v<T, float>) return "float32";
  if constexpr (std::is_same_v<T, Half>) return "float16";
  return "bfloat16";
}

template <typename T>
std::vector<T> Convert(const std::vector<float>& values) {
  std::vector<T> out(values.size());
  cpu::StoreBlock(values.data(), out.data(), 1,
                  static_cast<int64_t>(values.size()));
  return out;
}

template <typename T>
std::vector<float> Back(const std::vector<T>& values) {
  std::vector<float> out(values.size());
  cpu::LoadBlock(values.data(), 1, out.data(),
                 static_cast<int64_t>(values.size()));
  return out;
}

struct Totals {
  int64_t cases = 0, compared = 0, mismatches = 0, reference_failures = 0;
};

template <typename T>
void RunCase(const Shape& shape, std::mt19937* gen, Totals* totals) {
  const int64_t batch = static_cast<int64_t>(shape.q_lens.size());
  const int64_t d = shape.head_size, hq = shape.heads, hkv = shape.kv_heads;
  const bool paged = shape.block_size > 0;
  std::vector<cpu::AttentionSequence> sequences(batch);
  int64_t total_q = 0, total_kv = 0, num_blocks = 0;
  for (int64_t b = 0; b < batch; ++b) {
    sequences[b].q_start = total_q;
    sequences[b].q_len = shape.q_lens[b];
    sequences[b].kv_start = total_kv;
    sequences[b].kv_len = shape.kv_lens[b];
    total_q += shape.q_lens[b];
    total_kv += shape.kv_lens[b];
    if (paged) {
      num_blocks +=
          (shape.kv_lens[b] + shape.block_size - 1) / shape.block_size;
    }
  }
  // Paged: each sequence's blocks in a shuffled order, two spare blocks.
  std::vector<int64_t> block_ids;
  if (paged) {
    num_blocks += 2;
    block_ids.resize(num_blocks);
    for (int64_t i = 0; i < num_blocks; ++i) {
      block_ids[i] = i;
    }
    std::shuffle(block_ids.begin(), block_ids.end(), *gen);
    int64_t at = 0;
    for (auto& seq : sequences) {
      seq.blocks = block_ids.data() + at;
      at += (seq.kv_len + shape.block_size - 1) / shape.block_size;
    }
  }
  const int64_t kv_rows = paged ? num_blocks * shape.block_size : total_kv;
  std::normal_distribution<float> normal;
  auto fill = [&](int64_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = normal(*gen);
    return v;
  };
  std::vector<float> qf = fill(total_q * hq * d);
  std::vector<float> kf = fill(kv_rows * hkv * d);
  std::vector<float> vf = fill(kv_rows * hkv * d);
  if (shape.specials) {
    const float inf = std::numeric_limits<float>::infinity();
    std::uniform_int_distribution<int64_t> kv_at(0, kv_rows * hkv * d - 1);
    kf[kv_at(*gen)] = std::nanf("");
    kf[kv_at(*gen)] = inf;
    kf[kv_at(*gen)] = -inf;
    vf[kv_at(*gen)] = inf;
  }
  const std::vector<T> q = Convert<T>(qf), k = Convert<T>(kf),
                       v = Convert<T>(vf);
  // The inputs as the kernel reads them (rounded to T).
  qf = Back(q), kf = Back(k), vf = Back(v);

  const int64_t group = hq / hkv;
  std::vector<cpu::AttentionTile> tiles;
  for (int64_t b = 0; b < batch; ++b) {
    cpu::AppendTiles(sequences[b], b, hkv, group, d, &tiles);
  }
  // Key / value row j of sequence seq, kv head g (the kernel's KvRow).
  auto kv_offset = [&](const cpu::AttentionSequence& seq, int64_t j,
                       int64_t g) {
    const int64_t row =
        paged ? seq.blocks[j / shape.block_size] * shape.block_size +
                    j % shape.block_size
              : seq.kv_start + j;
    return (row * hkv + g) * d;
  };
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  auto run = [&](auto kernel) {
    std::vector<T> out(total_q * hq * d);
    const cpu::AttentionArgs<T> args{q.data(),
                                     hq * d,
                                     d,
                                     out.data(),
                                     hq * d,
                                     d,
                                     k.data(),
                                     paged ? shape.block_size * hkv * d : 0,
                                     hkv * d,
                                     d,
                                     v.data(),
                                     paged ? shape.block_size * hkv * d : 0,
                                     hkv * d,
                                     d,
                                     d,
                                     group,
                                     shape.block_size,
                                     scale,
                                     shape.causal,
                                     shape.window_left,
                                     shape.window_right};
    kernel(args, sequences.data(), tiles.data(),
           static_cast<int64_t>(tiles.size()));
    return out;
  };
  const std::vector<T> wide = run(&cpu::AttendTilesWideBase<T>);
  std::vector<std::vector<T>> others = {run(&cpu::AttendTilesBase<T>)};
  if (cpu::HasAvx2()) {
    others.push_back(run(&cpu::AttendTilesWideAvx2<T>));
    others.push_back(run(&cpu::AttendTilesAvx2<T>));
  }
  if (cpu::HasAvx512()) others.push_back(run(&cpu::AttendTilesAvx512<T>));
  ++totals->cases;
  // NaNs included: the kernel writes one NaN whatever the variant.
  for (const auto& other : others) {
    ++totals->compared;
    if (std::memcmp(other.data(), wide.data(), sizeof(T) * wide.size()) != 0) {
      ++totals->mismatches;
    }
  }

  // float64 reference, rows with a NaN or inf left to the bitwise check.
  const double tolerance =
      std::is_same_v<T, float> ? 2e-5 : (std::is_same_v<T, Half> ? 4e-3 : 3e-2);
  const std::vector<float> got = Back(wide);
  for (int64_t b = 0; b < batch; ++b) {
    const auto& seq = sequences[b];
    for (int64_t i = 0; i < seq.q_len; ++i) {
      const cpu::KeyRange range =
          cpu::VisibleKeys(i, seq.q_len, seq.kv_len, shape.causal,
                           shape.window_left, shape.window_right);
      for (int64_t h = 0; h < hq; ++h) {
        const int64_t g = h / group;
        const float* qr = qf.data() + ((seq.q_start + i) * hq + h) * d;
        const float* out = got.data() + ((seq.q_start + i) * hq + h) * d;
        std::vector<double> weights;
        double max = -INFINITY;
        bool finite = true;
        for (int64_t j = range.lo; j <= range.hi; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < d; ++c) {
            dot += double{qr[c]} * kf[kv_offset(seq, j, g) + c];
          }
          dot *= scale;
          finite = finite && std::isfinite(dot);
          weights.push_back(dot);
          max = std::max(max, dot);
        }
        if (!finite) continue;
        double sum = 0;
        for (double& w : weights) sum += (w = std::exp(w - max));
        for (int64_t c = 0; c < d && finite; ++c) {
          double value = 0;
          for (int64_t j = range.lo; j <= range.hi; ++j) {
            const float x = vf[kv_offset(seq, j, g) + c];
            finite = finite && std::isfinite(x);
            value += weights[j - range.lo] * x;
          }
          value = weights.empty() ? 0.0 : value / sum;
          if (finite && !(std::fabs(out[c] - value) <=
                          tolerance * (1.0 + std::fabs(value)))) {
            ++totals->reference_failures;
            finite = false;
          }
        }
      }
    }
  }
}

template <typename T>
Totals RunDtype() {
  std::mt19937 gen(20261124);
  Totals totals;
  const std::vector<std::vector<int64_t>> q_lens = {
      {1}, {7, 1, 33}, {70, 5}, {130}};
  const std::vector<std::vector<int64_t>> kv_lens = {
      {1}, {7, 300, 40}, {70, 90}, {200}};
  struct Heads {
    int64_t heads, kv_heads;
  };
  const Heads head_sets[] = {{4, 4}, {8, 2}, {6, 1}};
  struct Mask {
    bool causal;
    int64_t left, right;
  };
  const Mask masks[] = {
      {false, -1, -1}, {true, -1, -1}, {true, 37, -1}, {false, 20, 5}};
  int64_t n = 0;
  for (int64_t d : {64, 80, 128, 256}) {
    for (const Heads& heads : head_sets) {
      for (const Mask& mask : masks) {
        for (int64_t block : {int64_t{0}, int64_t{16}}) {
          const size_t pick = static_cast<size_t>(n++) % q_lens.size();
          RunCase<T>(
              {heads.heads, heads.kv_heads, d, mask.causal, mask.left,
               mask.right, block, q_lens[pick], kv_lens[pick], n % 5 == 0},
              &gen, &totals);
        }
      }
    }
  }
  std::printf(
      "%s: %lld cases, %lld comparisons, %lld differ, %lld off the "
      "float64 reference\n",
      Name<T>(), static_cast<long long>(totals.cases),
      static_cast<long long>(totals.compared),
      static_cast<long long>(totals.mismatches),
      static_cast<long long>(totals.reference_failures));
  return totals;
}

}  // namespace

int main() {
  std::printf("variants compared with the 16-lane one: baseline%s%s\n",
              cpu::HasAvx2() ? ", 16-lane on AVX2, AVX2" : "",
              cpu::HasAvx512() ? ", AVX-512" : "");
  bool ok = true;
  for (const Totals& t :
       {RunDtype<float>(), RunDtype<Half>(), RunDtype<BFloat16>()}) {
    ok = ok && t.cases > 0 && t.mismatches == 0 && t.reference_failures == 0;
  }
  std::printf(ok ? "OK\n" : "FAILED\n");
  return ok ? 0 : 1;
}
