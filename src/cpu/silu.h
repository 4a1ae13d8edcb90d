#ifndef POLYOPS_CPU_SILU_H_
#define POLYOPS_CPU_SILU_H_

#include <cmath>

namespace polyops::cpu {

// silu(g) = g * sigmoid(g) in float32; expf saturates cleanly at both ends.
inline float Silu(float g) { return g / (1.0f + std::exp(-g)); }

}  // namespace polyops::cpu

#endif  // POLYOPS_CPU_SILU_H_
