#ifndef POLYOPS_CPU_RUNTIME_PARALLEL_H_
#define POLYOPS_CPU_RUNTIME_PARALLEL_H_

#include <cstdint>
#include <type_traits>

#include "cpu/runtime/convert.h"
#include "cpu/runtime/isa.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace polyops::cpu {

// Reads *p exactly once. Index tensors (slot_mapping, positions) are caller
// memory that another thread may change while a call runs without the GIL:
// a kernel copies each index once with this, bounds-checks the copy and uses
// only the copy, so what it checked is what it uses. (A plain load lets the
// compiler load again, since a race is undefined behaviour.)
template <typename T>
POLYOPS_INLINE T ReadOnce(const T* p) {
  return __atomic_load_n(p, __ATOMIC_RELAXED);
}

// Orders this thread's earlier non-temporal stores before its later stores
// (SFENCE; a no-op off x86-64, which has no such stores here).
inline void StoreFence() {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}

// Below this many elements an OpenMP fork costs more than it saves.
inline constexpr int64_t kParallelGrain = 32768;

// fn(i) for i in [0, count), over OpenMP threads when `parallel`. The serial
// branch never enters the OpenMP runtime: even `parallel for if(false)`
// costs a runtime call, a measurable share of a tiny op.
template <typename Fn>
void ParallelFor(int64_t count, bool parallel, Fn&& fn) {
  if (parallel && count > 1) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < count; ++i) fn(i);
  } else {
    for (int64_t i = 0; i < count; ++i) fn(i);
  }
}

// ParallelFor for bodies that write with non-temporal stores and leave them
// unfenced: each thread fences once, after its last index, before the
// region ends (and the caller reads the output). A fence per row waits for
// the row's write-combining buffers to drain, so its writes stop overlapping
// the next row's compute: bfloat16 causal_softmax measured 0.62-0.65x a
// streamed copy with a fence per 2 KiB row, 0.80-0.84x with one per thread
// (docs/perf/cpu_softmax.md).
template <typename Fn>
void ParallelForStreaming(int64_t count, bool parallel, Fn&& fn) {
  if (parallel && count > 1) {
#pragma omp parallel
    {
#pragma omp for schedule(static) nowait
      for (int64_t i = 0; i < count; ++i) fn(i);
      StoreFence();
    }
  } else {
    for (int64_t i = 0; i < count; ++i) fn(i);
    StoreFence();
  }
}

// fn(i) built for the baseline, AVX2 and AVX-512: `flatten` inlines fn's
// body, and everything it calls, into each, so its loops are vectorized for
// that ISA.
template <typename Fn>
__attribute__((flatten)) void CallBase(Fn& fn, int64_t i) {
  fn(i);
}
template <typename Fn>
POLYOPS_TARGET_AVX2 __attribute__((flatten)) void CallAvx2(Fn& fn, int64_t i) {
  fn(i);
}
template <typename Fn>
POLYOPS_TARGET_AVX512 __attribute__((flatten)) void CallAvx512(Fn& fn,
                                                               int64_t i) {
  fn(i);
}

// ParallelFor with the body built for each ISA and the widest one the CPU
// has picked at run time: for compute-bound bodies (exp, float16/bfloat16
// conversion), not for plain copies, whose code it would only triple.
template <typename Fn>
void ParallelForIsa(int64_t count, bool parallel, Fn&& fn) {
  using F = std::remove_reference_t<Fn>;
  void (*const call)(F&, int64_t) =
      PickIsa(&CallBase<F>, &CallAvx2<F>, &CallAvx512<F>);
  ParallelFor(count, parallel, [&](int64_t i) { call(fn, i); });
}

}  // namespace polyops::cpu

#endif  // POLYOPS_CPU_RUNTIME_PARALLEL_H_
