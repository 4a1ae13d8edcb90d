#ifndef POLYOPS_CPU_KERNELS_ELEMENTWISE_SILU_H_
#define POLYOPS_CPU_KERNELS_ELEMENTWISE_SILU_H_

#include "cpu/kernels/elementwise/vector_exp.h"

namespace polyops::cpu {

// silu(g) = g / (1 + exp(-g)) in float32. VectorExp (not std::exp, a libm
// call) lets the elementwise loops vectorize; its IEEE ends give torch's
// tails: g << 0 gives g / inf = -0, silu(-inf) = -inf / inf = NaN,
// silu(inf) = inf / 1 = inf.
POLYOPS_INLINE float Silu(float g) { return g / (1.0f + VectorExp(-g)); }

}  // namespace polyops::cpu

#endif  // POLYOPS_CPU_KERNELS_ELEMENTWISE_SILU_H_
