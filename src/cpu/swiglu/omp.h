#ifndef POLYOPS_CPU_SWIGLU_OMP_H_
#define POLYOPS_CPU_SWIGLU_OMP_H_

#include "base/swiglu.h"
#include "core/dispatch.h"
#include "core/operator.h"
#include "cpu/kernels/elementwise/elementwise.h"
#include "cpu/kernels/elementwise/silu.h"

namespace polyops {

// Slot 0: blocked, OpenMP over blocks for large tensors.
template <>
class Operator<Swiglu, Device::Type::kCpu, 0> : public Swiglu {
 public:
  static constexpr const char* kImplementationName = "omp";
  using Swiglu::Swiglu;

  void operator()(const Handle&, const Args& args) const override {
    DispatchDataType<POLYOPS_FLOAT_TYPES>(
        dtype_, "polyops.swiglu", [&](auto tag) {
          using T = typename decltype(tag)::type;
          cpu::MapBlocks<T, 3, /*kIsaVariants=*/true>(
              layout_, {args.out->data(), args.input.data(), args.gate.data()},
              {0, 0, 0},
              /*parallel=*/true,
              [](float* y, const float* const* x, int64_t n) {
                for (int64_t i = 0; i < n; ++i)
                  y[i] = x[0][i] * cpu::Silu(x[1][i]);
              });
        });
  }
};

}  // namespace polyops

#endif  // POLYOPS_CPU_SWIGLU_OMP_H_
