// In-cache cost per element (thread CPU time) of the CPU row kernels against
// memcpy, one thread: the roofline side of benchmarks/rms_norm.py (issue 13).
// 64 rows of 4096 (512 KiB of float32 in, as much out) stay in L2, so the
// figures are what the core spends per element, not what memory allows.
//
// Build and run (from the repository root; the flags are the library's):
//   g++ -std=c++17 -O3 -ffp-contract=off -fno-trapping-math -fno-math-errno \
//     -Isrc benchmarks/row_kernels_incache.cc src/cpu/convert.cc \
//     -o build/row_kernels_incache && build/row_kernels_incache
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <random>
#include <vector>

#include "cpu/avx512_rows.h"
#include "cpu/causal_softmax/omp.h"
#include "cpu/rms_norm/omp.h"
#include "cpu/row_kernels.h"
#include "cpu/vector_exp.h"

namespace {

using polyops::BFloat16;
using polyops::Half;

constexpr int64_t kRows = 64;
constexpr int64_t kHidden = 4096;

// This thread's CPU time in ns: on a shared, oversubscribed machine the
// wall clock also counts the time other processes hold the core.
double ThreadNs() {
  timespec now;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return now.tv_sec * 1e9 + now.tv_nsec;
}

// Median over 15 samples of CPU ns per element of fn(), one call = all rows.
template <typename Fn>
double NsPerElement(Fn&& fn) {
  std::vector<double> samples;
  for (int warm = 0; warm < 3; ++warm) fn();
  for (int s = 0; s < 15; ++s) {
    const int calls = 20;
    const double start = ThreadNs();
    for (int c = 0; c < calls; ++c) fn();
    samples.push_back((ThreadNs() - start) / (calls * kRows * kHidden));
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

template <typename T>
void Fill(std::vector<T>& v, std::mt19937& gen) {
  std::normal_distribution<float> dist;
  std::vector<float> f(v.size());
  for (float& x : f) x = dist(gen);
  polyops::cpu::StoreBlock(f.data(), v.data(), 1,
                           static_cast<int64_t>(v.size()));
}

template <typename T>
void Run(const char* name) {
  namespace cpu = polyops::cpu;
  std::mt19937 gen(0);
  std::vector<T> x(kRows * kHidden), r(kRows * kHidden), y(kRows * kHidden),
      s(kRows * kHidden), w(kHidden);
  Fill(x, gen), Fill(r, gen), Fill(w, gen);
  std::vector<float> ws(kHidden), stage(cpu::kMaxStagedRow);
  std::vector<T> t_stage(cpu::kMaxStagedRow);
  cpu::LoadBlock(w.data(), 1, ws.data(), kHidden);
  const float eps = 1e-6f;

  const double copy = NsPerElement([&] {
    for (int64_t row = 0; row < kRows; ++row) {
      std::memcpy(y.data() + row * kHidden, x.data() + row * kHidden,
                  kHidden * sizeof(T));
    }
  });
  const auto generic = cpu::RmsNormRowForCpu<T>();
  const double rms_generic = NsPerElement([&] {
    for (int64_t row = 0; row < kRows; ++row) {
      generic(x.data() + row * kHidden, ws.data(), y.data() + row * kHidden,
              kHidden, eps, stage.data(), nullptr);
    }
  });
  const double rms_512 = NsPerElement([&] {
    for (int64_t row = 0; row < kRows; ++row) {
      cpu::RmsNormRow512(x.data() + row * kHidden, ws.data(),
                         y.data() + row * kHidden, kHidden, eps, false);
    }
  });
  const double add_rms_512 = NsPerElement([&] {
    for (int64_t row = 0; row < kRows; ++row) {
      cpu::AddRmsNormRow512(x.data() + row * kHidden, r.data() + row * kHidden,
                            ws.data(), s.data() + row * kHidden,
                            y.data() + row * kHidden, kHidden, eps,
                            t_stage.data(), false);
    }
  });
  const double softmax_512 = NsPerElement([&] {
    for (int64_t row = 0; row < kRows; ++row) {
      cpu::CausalSoftmaxRow512(x.data() + row * kHidden,
                               y.data() + row * kHidden, kHidden, kHidden,
                               stage.data(), false);
    }
  });
  const auto softmax_generic = cpu::CausalSoftmaxRowForCpu<T>();
  const double softmax_gen = NsPerElement([&] {
    for (int64_t row = 0; row < kRows; ++row) {
      softmax_generic(x.data() + row * kHidden, y.data() + row * kHidden,
                      kHidden, kHidden, stage.data());
    }
  });
  std::printf("%-5s %8.3f %12.3f %10.3f %13.3f %14.3f %14.3f\n", name, copy,
              rms_generic, rms_512, add_rms_512, softmax_gen, softmax_512);
}

}  // namespace

int main() {
  if (!polyops::cpu::HasAvx512()) {
    std::printf(
        "this CPU has no AVX-512: the *_512 kernels are not used here\n");
    return 0;
  }
  std::printf(
      "CPU ns per element, one thread, %lld x %lld rows in cache (median of "
      "15)\n",
      static_cast<long long>(kRows), static_cast<long long>(kHidden));
  std::printf("%-5s %8s %12s %10s %13s %14s %14s\n", "dtype", "memcpy",
              "rms generic", "rms avx512", "add_rms 512", "softmax gen",
              "softmax 512");
  Run<float>("f32");
  Run<Half>("f16");
  Run<BFloat16>("bf16");
  return 0;
}
