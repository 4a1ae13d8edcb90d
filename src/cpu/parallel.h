#ifndef POLYOPS_CPU_PARALLEL_H_
#define POLYOPS_CPU_PARALLEL_H_

#include <cstdint>
#include <type_traits>

#include "cpu/convert.h"

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
  void (*const call)(F&, int64_t) = HasAvx512() ? &CallAvx512<F>
                                    : HasAvx2() ? &CallAvx2<F>
                                                : &CallBase<F>;
  ParallelFor(count, parallel, [&](int64_t i) { call(fn, i); });
}

}  // namespace polyops::cpu

#endif  // POLYOPS_CPU_PARALLEL_H_
