#ifndef POLYOPS_CPU_PARALLEL_H_
#define POLYOPS_CPU_PARALLEL_H_

#include <cstdint>

namespace polyops::cpu {

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

}  // namespace polyops::cpu

#endif  // POLYOPS_CPU_PARALLEL_H_
