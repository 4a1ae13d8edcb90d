// The memory side of causal_softmax's roofline: the traffic of a 16-bit
// [32, 1024, 1024] causal call with no arithmetic at all (row r reads its
// r % 1024 + 1 visible keys and streams the whole 2 KiB row out, as
// CausalSoftmaxRow512 does), against the row-by-row copy that
// benchmarks/memory_bound.py compares with. GB/s count 128 MiB for both, as
// memory_bound.py does; the pattern reads only half of that, but each row's
// read starts a new, short stream that the hardware prefetcher restarts on.
// Medians of 9 interleaved samples, three rounds; OMP_NUM_THREADS threads.
//
// Build and run (from the repository root; on a CPU without AVX-512,
// -mavx2 instead of -mavx512f: 32-byte loads and streamed stores, as the
// library's AVX2 row):
//   g++ -std=c++17 -O2 -mavx512f -fopenmp benchmarks/softmax_traffic.cc -o
//   build/softmax_traffic && OMP_NUM_THREADS=2 build/softmax_traffic
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

constexpr int64_t kRows = 32 * 1024, kKeys = 1024;

enum class Pattern { kTriangle, kTrianglePrefetch, kStreamOnly };

// Reads the visible keys of every row (summed, so the loads stay) and
// streams the row out; kTrianglePrefetch also fetches the next row's
// visible keys into L2 first, as the kernel does.
#if defined(__AVX512F__)
using Vector = __m512i;
constexpr int64_t kLanes = 32;  // 16-bit values per vector
Vector Zero() { return _mm512_setzero_si512(); }
Vector Add(Vector a, const uint16_t* p) {
  return _mm512_add_epi32(a, _mm512_loadu_si512(p));
}
void Stream(uint16_t* p, Vector v) {
  _mm512_stream_si512(reinterpret_cast<__m512i*>(p), v);
}
int Sum(Vector v) { return _mm512_reduce_add_epi32(v); }
#else
using Vector = __m256i;
constexpr int64_t kLanes = 16;
Vector Zero() { return _mm256_setzero_si256(); }
Vector Add(Vector a, const uint16_t* p) {
  return _mm256_add_epi32(
      a, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
void Stream(uint16_t* p, Vector v) {
  _mm256_stream_si256(reinterpret_cast<__m256i*>(p), v);
}
int Sum(Vector v) {
  alignas(32) int lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), v);
  int total = 0;
  for (int lane : lanes) total += lane;
  return total;
}
#endif

int Traffic(const uint16_t* x, uint16_t* y, Pattern pattern) {
  int total = 0;
#pragma omp parallel reduction(+ : total)
  {
    Vector acc = Zero();
#pragma omp for schedule(static) nowait
    for (int64_t r = 0; r < kRows; ++r) {
      const uint16_t* xr = x + r * kKeys;
      if (pattern == Pattern::kTrianglePrefetch && r + 1 < kRows) {
        for (int64_t i = 0; i <= (r + 1) % kKeys; i += 32) {
          _mm_prefetch(reinterpret_cast<const char*>(xr + kKeys + i),
                       _MM_HINT_T1);
        }
      }
      if (pattern != Pattern::kStreamOnly) {
        for (int64_t i = 0; i <= r % kKeys; i += kLanes) acc = Add(acc, xr + i);
      }
      for (int64_t i = 0; i < kKeys; i += kLanes)
        Stream(y + r * kKeys + i, acc);
    }
    _mm_sfence();
    total += Sum(acc);
  }
  return total;
}

void Copy(const uint16_t* x, uint16_t* z) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < kRows; ++r) {
    std::memcpy(z + r * kKeys, x + r * kKeys, kKeys * sizeof(uint16_t));
  }
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since)
      .count();
}

}  // namespace

int main() {
  const size_t bytes = kRows * kKeys * sizeof(uint16_t);
  auto* x = static_cast<uint16_t*>(std::aligned_alloc(64, bytes));
  auto* y = static_cast<uint16_t*>(std::aligned_alloc(64, bytes));
  auto* z = static_cast<uint16_t*>(std::aligned_alloc(64, bytes));
  std::memset(x, 1, bytes);
  std::memset(y, 0, bytes);
  std::memset(z, 0, bytes);
  const struct {
    Pattern pattern;
    const char* name;
  } kCases[] = {
      {Pattern::kTriangle, "visible keys read, rows streamed"},
      {Pattern::kTrianglePrefetch, "same, next row prefetched (T1)"},
      {Pattern::kStreamOnly, "rows streamed only"},
  };
  const double counted = 2.0 * bytes;  // memory_bound.py's bytes per call
  volatile int sink = 0;
  std::printf("%-36s %9s %8s %9s %8s %6s\n", "pattern", "ms", "GB/s", "copy ms",
              "GB/s", "ratio");
  for (int round = 0; round < 3; ++round) {
    for (const auto& c : kCases) {
      std::vector<double> mine, copy;
      for (int s = 0; s < 9; ++s) {
        auto start = std::chrono::steady_clock::now();
        sink = sink + Traffic(x, y, c.pattern);
        mine.push_back(Seconds(start));
        start = std::chrono::steady_clock::now();
        Copy(x, z);
        copy.push_back(Seconds(start));
      }
      std::sort(mine.begin(), mine.end());
      std::sort(copy.begin(), copy.end());
      std::printf("%-36s %9.3f %8.1f %9.3f %8.1f %6.2f\n", c.name,
                  mine[4] * 1e3, counted / mine[4] / 1e9, copy[4] * 1e3,
                  counted / copy[4] / 1e9, copy[4] / mine[4]);
    }
  }
  std::free(x);
  std::free(y);
  std::free(z);
  return 0;
}
