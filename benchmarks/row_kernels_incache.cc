// Cost per element (thread CPU time) of the CPU row kernels against memcpy,
// one thread: the roofline side of benchmarks/memory_bound.py
// (docs/perf/cpu_rms_norm.md). By default 64 rows of 4096 (1 MiB of float32
// in and out) stay in L2, so the figures are what the core spends per element,
// not what memory allows; `row_kernels_incache 4096` takes 4096 rows (out of
// cache, outputs streamed as the library streams them) for the single-thread
// memory side. On a CPU with AVX2 but no AVX-512 it runs the AVX2 loops instead
// (one table, with bfloat16 / float16 mul). A second table runs
// causal_softmax's AVX-512 row over a [256, 1024] causal triangle (in cache),
// or B copies of it with a second argument
// (`row_kernels_incache 64 128`: 32M elements, out of cache), and its exp
// pass alone; docs/perf/cpu_softmax.md quotes it.
// Thread CPU time, not the wall clock: on a shared, oversubscribed machine
// the wall clock also counts the time other processes hold the core.
//
// Build and run (from the repository root; the flags are the library's):
//   g++ -std=c++17 -O3 -ffp-contract=off -fno-trapping-math -fno-math-errno \
//     -Isrc benchmarks/row_kernels_incache.cc src/cpu/runtime/convert.cc \
//     -o build/row_kernels_incache && build/row_kernels_incache
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <vector>

#include "cpu/causal_softmax/omp.h"
#include "cpu/kernels/elementwise/binary_vector.h"
#include "cpu/kernels/elementwise/vector_exp.h"
#include "cpu/kernels/rows/avx2_rows.h"
#include "cpu/kernels/rows/avx512_rows.h"
#include "cpu/kernels/rows/row_kernels.h"
#include "cpu/rms_norm/omp.h"

namespace {

using polyops::BFloat16;
using polyops::Half;

constexpr int64_t kHidden = 4096;

// bfloat16 rounding by AVX512_BF16 (main() checks the CPU has it).
template <typename T>
constexpr bool kNative = std::is_same_v<T, BFloat16>;

double ThreadNs() {
  timespec now;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return now.tv_sec * 1e9 + now.tv_nsec;
}

// The fastest of `samples` samples of CPU ns per element of fn() (one call
// = `elements` elements): other processes on a shared core only add time
// (evicted caches, a busy sibling), so the minimum is the kernel's cost.
template <typename Fn>
double NsPerElement(int64_t elements, int samples, int calls, Fn&& fn) {
  std::vector<double> times;
  fn();
  for (int s = 0; s < samples; ++s) {
    const double start = ThreadNs();
    for (int c = 0; c < calls; ++c) fn();
    times.push_back((ThreadNs() - start) / (calls * elements));
  }
  return *std::min_element(times.begin(), times.end());
}

// 64-byte aligned, as torch allocates: the library streams a row only from
// an aligned address (a std::vector of this size is not aligned).
template <typename T>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() = default;
  template <typename U>
  AlignedAllocator(const AlignedAllocator<U>&) {}
  T* allocate(size_t n) {
    return static_cast<T*>(
        std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64));
  }
  void deallocate(T* p, size_t) { std::free(p); }
  bool operator==(const AlignedAllocator&) const { return true; }
  bool operator!=(const AlignedAllocator&) const { return false; }
};
template <typename T>
using Buffer = std::vector<T, AlignedAllocator<T>>;

template <typename T>
void Fill(Buffer<T>& v, std::mt19937& gen) {
  std::normal_distribution<float> dist;
  std::vector<float> f(v.size());
  for (float& x : f) x = dist(gen);
  polyops::cpu::StoreBlock(f.data(), v.data(), 1,
                           static_cast<int64_t>(v.size()));
}

// causal_softmax's AVX-512 row without its exp pass (a made-up inverse).
template <typename T>
POLYOPS_TARGET_AVX512_ROWS void SoftmaxWithoutExp(const T* x, T* y,
                                                  float* stage, bool stream) {
  const float max = polyops::cpu::StageAndMax512(x, stage, kHidden);
  polyops::cpu::ScaleAndZeroRow512<false>(stage, 1.0f / (max + 2.0f), y,
                                          kHidden, kHidden, stream);
}

template <typename T>
void Run(const char* name, int64_t rows) {
  namespace cpu = polyops::cpu;
  const int64_t n = rows * kHidden;
  const bool stream = n * int64_t{sizeof(T)} >= cpu::kStreamingBytes;
  const int samples = rows > 256 ? 5 : 15;
  const int calls = rows > 256 ? 1 : 20;
  std::mt19937 gen(0);
  Buffer<T> x(n), r(n), y(n), s(n), w(kHidden);
  Fill(x, gen), Fill(r, gen), Fill(w, gen);
  std::vector<float> ws(kHidden), stage(cpu::kMaxStagedRow);
  std::vector<T> t_stage(cpu::kMaxStagedRow);
  cpu::LoadBlock(w.data(), 1, ws.data(), kHidden);
  const float eps = 1e-6f;
  auto time = [&](auto&& fn) { return NsPerElement(n, samples, calls, fn); };

  const double copy =
      time([&] { std::memcpy(y.data(), x.data(), n * sizeof(T)); });
  const auto generic = cpu::RmsNormRowForCpu<T>();
  std::vector<T> y_stage(cpu::kMaxStagedRow);
  const double rms_generic = time([&] {
    for (int64_t row = 0; row < rows; ++row) {
      generic(x.data() + row * kHidden, ws.data(), y.data() + row * kHidden,
              kHidden, eps, stage.data(), stream ? y_stage.data() : nullptr);
    }
  });
  const double rms_512 = time([&] {
    for (int64_t row = 0; row < rows; ++row) {
      cpu::RmsNormRow512<T, kNative<T>>(x.data() + row * kHidden, ws.data(),
                                        y.data() + row * kHidden, kHidden, eps,
                                        stream);
    }
    if (stream) cpu::StoreFence();  // as ParallelForStreaming
  });
  const double add_rms_512 = time([&] {
    for (int64_t row = 0; row < rows; ++row) {
      cpu::AddRmsNormRow512<T, kNative<T>>(
          x.data() + row * kHidden, r.data() + row * kHidden, ws.data(),
          s.data() + row * kHidden, y.data() + row * kHidden, kHidden, eps,
          t_stage.data(), stream);
    }
    if (stream) cpu::StoreFence();  // as ParallelForStreaming
  });
  // Full rows (every key visible): the cost per visible element.
  const auto softmax_generic = cpu::CausalSoftmaxRowForCpu<T>();
  const double softmax_gen = time([&] {
    for (int64_t row = 0; row < rows; ++row) {
      softmax_generic(x.data() + row * kHidden, y.data() + row * kHidden,
                      kHidden, kHidden, stage.data());
    }
  });
  const double softmax_512 = time([&] {
    for (int64_t row = 0; row < rows; ++row) {
      cpu::CausalSoftmaxRow512<T, kNative<T>>(x.data() + row * kHidden,
                                              y.data() + row * kHidden, kHidden,
                                              kHidden, stage.data(), stream);
    }
    if (stream) cpu::StoreFence();  // as ParallelForStreaming
  });
  // The same without its exp pass: what the exp costs is the difference.
  const double softmax_no_exp = time([&] {
    for (int64_t row = 0; row < rows; ++row) {
      SoftmaxWithoutExp(x.data() + row * kHidden, y.data() + row * kHidden,
                        stage.data(), stream);
    }
    if (stream) cpu::StoreFence();  // as ParallelForStreaming
  });
  std::printf("%-5s %7.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f\n", name, copy,
              rms_generic, rms_512, add_rms_512, softmax_gen, softmax_512,
              softmax_no_exp);
}

// causal_softmax's exp pass over `count` staged rows of `keys`; max and the
// sums go through volatiles, so none of the pass is folded away.
volatile float exp_pass_max = 1.0f;
volatile float exp_pass_sink = 0.0f;
// The exp of T's rows: SoftmaxExp for float32, SoftmaxExp2Of for 16 bits.
template <typename T>
POLYOPS_TARGET_AVX512_ROWS void ExpPass(float* rows, int64_t count,
                                        int64_t keys) {
  namespace cpu = polyops::cpu;
  const float max = exp_pass_max;
  float sum = 0.0f;
  for (int64_t row = 0; row < count; ++row) {
    sum += cpu::ExpShiftSum512<cpu::kSoftmaxBase2<T>>(rows + row * keys, max,
                                                      rows + row * keys, keys);
  }
  exp_pass_sink = sum;
}

// The other two passes of causal_softmax's AVX-512 row over the same
// triangle as RunCausal: the max (16-bit rows staged as float on the way),
// and the scaling, rounding and zeros (one staged row, a made-up inverse).
template <typename T>
POLYOPS_TARGET_AVX512_ROWS void MaxPass(const T* x, float* stage, int64_t rows,
                                        int64_t keys) {
  namespace cpu = polyops::cpu;
  float sum = 0.0f;
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t visible = 4 * (row % 256 + 1);
    if constexpr (std::is_same_v<T, float>) {
      sum += cpu::RowMax512(x + row * keys, visible);
    } else {
      float min;
      sum += cpu::StageAndMax512<T, true, kNative<T>>(x + row * keys, stage,
                                                      visible, &min);
    }
  }
  exp_pass_sink = sum;
}

template <typename T>
POLYOPS_TARGET_AVX512_ROWS void ScalePass(const float* stage, T* y,
                                          int64_t rows, int64_t keys) {
  for (int64_t row = 0; row < rows; ++row) {
    polyops::cpu::ScaleAndZeroRow512<kNative<T>>(
        stage, 0.5f, y + row * keys, keys, 4 * (row % 256 + 1), false, true);
  }
}

// causal_softmax as benchmarks/memory_bound.py runs it: rows of 1024 keys,
// the causal triangle's visible lengths (row r sees 4 (r + 1) of 256 rows:
// every length in steps of 4, 514 on average), the masked rest written as
// zeros. CPU ns per element of the whole [256, 1024] tensor (what that
// benchmark counts) against memcpy of the tensor, and the exp pass alone
// (ExpShiftSum512 over staged rows of 1024) per exp.
template <typename T>
void RunCausal(const char* name, int64_t batches) {
  namespace cpu = polyops::cpu;
  constexpr int64_t kKeys = 1024, kQueries = 256;
  const int64_t kRows = kQueries * batches;
  const int64_t n = kRows * kKeys;
  const bool stream = n * int64_t{sizeof(T)} >= cpu::kStreamingBytes;
  auto visible = [&](int64_t row) { return 4 * (row % kQueries + 1); };
  std::mt19937 gen(0);
  Buffer<T> x(n), y(n);
  Fill(x, gen);
  std::vector<float> stage(cpu::kMaxStagedRow);
  // 4 staged rows (16 KiB) stay in L1, as one row does in the op.
  constexpr int64_t kExpRows = 4;
  std::vector<float> rows(kExpRows * kKeys, -0.5f);
  auto time = [&](auto&& fn) {
    return NsPerElement(n, batches > 1 ? 5 : 15, batches > 1 ? 1 : 20, fn);
  };
  const double copy =
      time([&] { std::memcpy(y.data(), x.data(), n * sizeof(T)); });
  auto softmax_stores = [&](bool streamed) {
    return time([&] {
      for (int64_t row = 0; row < kRows; ++row) {
        const bool last = row + 1 == kRows;
        cpu::CausalSoftmaxRow512<T, kNative<T>>(
            x.data() + row * kKeys, y.data() + row * kKeys, kKeys, visible(row),
            stage.data(), streamed, x.data() + (row + 1) * kKeys,
            last ? 0 : visible(row + 1));
      }
      if (streamed) cpu::StoreFence();  // as ParallelForStreaming
    });
  };
  const double softmax = softmax_stores(stream);
  // Out of cache, ordinary stores too: what streaming saves.
  const double other = batches > 1 ? softmax_stores(!stream) : 0.0;
  // In place, exp(e - 1) of values in (0, 1]: t stays in (-1.5, 0], as in
  // softmax, every call.
  const double exp_pass = NsPerElement(kExpRows * kKeys, 15, 1280, [&] {
    ExpPass<T>(rows.data(), kExpRows, kKeys);
  });
  // The passes in cache, per element of the tensor (as `softmax`).
  std::vector<float> staged(kKeys, 0.25f);
  const int64_t in_cache = kQueries * kKeys;
  const double max_pass = NsPerElement(in_cache, 15, 20, [&] {
    MaxPass<T>(x.data(), stage.data(), kQueries, kKeys);
  });
  const double scale_pass = NsPerElement(in_cache, 15, 20, [&] {
    ScalePass<T>(staged.data(), y.data(), kQueries, kKeys);
  });
  std::printf("%-5s %7.3f %9.3f %9.2f %9.3f %9.3f %9.3f %11.3f\n", name, copy,
              softmax, copy / softmax, exp_pass, max_pass, scale_pass, other);
}

// The AVX2 loops (cpu/kernels/rows/avx2_rows.h) on a CPU without AVX-512,
// against the staged generic kernels, memcpy and bfloat16 / float16 mul; the
// same rows as Run, softmax over full rows.
template <typename T>
void RunAvx2(const char* name, int64_t rows) {
  namespace cpu = polyops::cpu;
  const int64_t n = rows * kHidden;
  const bool stream = n * int64_t{sizeof(T)} >= cpu::kStreamingBytes;
  const int samples = rows > 256 ? 5 : 25;
  const int calls = rows > 256 ? 1 : 20;
  std::mt19937 gen(0);
  Buffer<T> x(n), r(n), y(n), s(n), w(kHidden);
  Fill(x, gen), Fill(r, gen), Fill(w, gen);
  std::vector<float> ws(kHidden), stage(cpu::kMaxStagedRow);
  std::vector<T> t_stage(cpu::kMaxStagedRow), y_stage(cpu::kMaxStagedRow);
  cpu::LoadBlock(w.data(), 1, ws.data(), kHidden);
  std::vector<float> pairs = ws;  // the AVX2 rows' weight order
  cpu::PairOrderWeights<T>(pairs.data(), kHidden);
  const float eps = 1e-6f;
  auto time = [&](auto&& fn) { return NsPerElement(n, samples, calls, fn); };
  auto fenced = [&](auto&& fn) {
    return time([&] {
      fn();
      if (stream) cpu::StoreFence();  // as ParallelForStreaming
    });
  };
  const double copy =
      time([&] { std::memcpy(y.data(), x.data(), n * sizeof(T)); });
  const auto generic = cpu::RmsNormRowForCpu<T>();
  const double rms_generic = time([&] {
    for (int64_t row = 0; row < rows; ++row) {
      generic(x.data() + row * kHidden, ws.data(), y.data() + row * kHidden,
              kHidden, eps, stage.data(), stream ? y_stage.data() : nullptr);
    }
  });
  const double rms = fenced([&] {
    for (int64_t row = 0; row < rows; ++row) {
      cpu::RmsNormRow256<T>(x.data() + row * kHidden, pairs.data(),
                            y.data() + row * kHidden, kHidden, eps, stream,
                            nullptr);
    }
  });
  const double add_rms = fenced([&] {
    for (int64_t row = 0; row < rows; ++row) {
      cpu::AddRmsNormRow256<T>(
          x.data() + row * kHidden, r.data() + row * kHidden, pairs.data(),
          s.data() + row * kHidden, y.data() + row * kHidden, kHidden, eps,
          t_stage.data(), stream, nullptr, nullptr);
    }
  });
  const auto softmax_generic = cpu::CausalSoftmaxRowForCpu<T>();
  const double softmax_gen = time([&] {
    for (int64_t row = 0; row < rows; ++row) {
      softmax_generic(x.data() + row * kHidden, y.data() + row * kHidden,
                      kHidden, kHidden, stage.data());
    }
  });
  const double softmax = fenced([&] {
    for (int64_t row = 0; row < rows; ++row) {
      cpu::CausalSoftmaxRow256<T>(x.data() + row * kHidden,
                                  y.data() + row * kHidden, kHidden, kHidden,
                                  stage.data(), stream, nullptr, 0);
    }
  });
  const double mul = fenced([&] {
    cpu::BinarySpan256<cpu::BinaryOp::kMul, T>(x.data(), r.data(), y.data(), n,
                                               stream);
  });
  std::printf("%-5s %7.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f\n", name, copy,
              rms_generic, rms, add_rms, softmax_gen, softmax, mul);
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 64;
  if (!polyops::cpu::HasAvx512Bf16()) {
    if (polyops::cpu::HasAvx512() || !polyops::cpu::HasAvx2()) {
      std::printf(
          "this CPU has AVX-512 without AVX512_BF16, or no AVX2: not "
          "measured\n");
      return 0;
    }
    std::printf(
        "AVX2 (no AVX-512): CPU ns per element, one thread, %lld x %lld "
        "(fastest sample); add_rms: per element of x1; softmax: full rows\n",
        static_cast<long long>(rows), static_cast<long long>(kHidden));
    std::printf("%-5s %7s %9s %9s %9s %9s %9s %9s\n", "dtype", "memcpy",
                "rms gen", "rms 256", "addrms256", "smax gen", "smax 256",
                "mul 256");
    RunAvx2<float>("f32", rows);
    RunAvx2<Half>("f16", rows);
    RunAvx2<BFloat16>("bf16", rows);
    return 0;
  }
  std::printf(
      "CPU ns per element, one thread, %lld x %lld (fastest sample); add_rms: "
      "per "
      "element of x1\n",
      static_cast<long long>(rows), static_cast<long long>(kHidden));
  std::printf("%-5s %7s %9s %9s %9s %9s %9s %9s\n", "dtype", "memcpy",
              "rms gen", "rms 512", "addrms512", "smax gen", "smax 512",
              "smax noexp");
  Run<float>("f32", rows);
  Run<Half>("f16", rows);
  Run<BFloat16>("bf16", rows);
  std::printf(
      "\ncausal_softmax [%lld x 256, 1024], visible 4 (row %% 256 + 1): CPU ns "
      "per element of the tensor, one thread (fastest sample); exp/exp: the "
      "exp "
      "pass per exp; max and scale pass per element of the tensor, in cache\n",
      static_cast<long long>(argc > 2 ? std::atoll(argv[2]) : 1));
  std::printf("%-5s %7s %9s %9s %9s %9s %9s %11s\n", "dtype", "memcpy",
              "softmax", "copy/smax", "exp/exp", "max pass", "scale pass",
              "other store");
  const int64_t batches = argc > 2 ? std::atoll(argv[2]) : 1;
  RunCausal<float>("f32", batches);
  RunCausal<Half>("f16", batches);
  RunCausal<BFloat16>("bf16", batches);
  return 0;
}
