#ifndef POLYOPS_CPU_ADD_OMP_H_
#define POLYOPS_CPU_ADD_OMP_H_

#include <type_traits>

#include "base/add.h"
#include "core/dispatch.h"
#include "core/operator.h"
#include "cpu/kernels/elementwise/binary_vector.h"
#include "cpu/kernels/elementwise/elementwise.h"

namespace polyops {

// Slot 1: blocked, vectorized, OpenMP over blocks for large tensors.
template <>
class Operator<Add, Device::Type::kCpu, 1> : public Add {
 public:
  static constexpr const char* kImplementationName = "omp";
  using Add::Add;

  void operator()(const Handle&, const Args& args) const override {
    DispatchDataType<POLYOPS_INTEGER_TYPES, POLYOPS_ALL_FLOAT_TYPES>(
        dtype_, "polyops.add", [&](auto tag) {
          using T = typename decltype(tag)::type;
          using C = cpu::ComputeType<T>;
          void* const data[3] = {args.out->data(), args.input.data(),
                                 args.other.data()};
          // With AVX-512 or AVX2 and unit inner strides, floats take one loop
          // that converts in registers
          // (cpu/kernels/elementwise/binary_vector.h).
          if (alpha_is_one_) {
            if (cpu::TryBinaryVector<cpu::BinaryOp::kAdd, T>(layout_, data)) {
              return;
            }
            // 16-bit floats convert in and out of every block: built per
            // ISA (F16C, AVX-512 shifts and rounding), not for the SSE2
            // baseline.
            constexpr bool kIsaVariants = !std::is_same_v<T, C>;
            cpu::MapBlocks<T, 3, kIsaVariants>(
                layout_, data, {0, 0, 0},
                /*parallel=*/true, [](C* y, const C* const* x, int64_t n) {
                  for (int64_t i = 0; i < n; ++i) {
                    y[i] = cpu::WrappingAdd(x[0][i], x[1][i]);
                  }
                });
            return;
          }
          const C alpha = cpu::AlphaAs<C>(alpha_);
          if (cpu::TryBinaryVector<cpu::BinaryOp::kAddScaled, T>(
                  layout_, data, static_cast<float>(alpha))) {
            return;
          }
          // Floats also per ISA here: float32/float64's fused multiply-add
          // is one instruction with FMA, a libm call without.
          constexpr bool kIsaVariants = !std::is_integral_v<C>;
          cpu::MapBlocks<T, 3, kIsaVariants>(
              layout_, data, {0, 0, 0},
              /*parallel=*/true, [alpha](C* y, const C* const* x, int64_t n) {
                for (int64_t i = 0; i < n; ++i) {
                  y[i] = cpu::ScaledAdd<T>(x[0][i], x[1][i], alpha);
                }
              });
        });
  }
};

}  // namespace polyops

#endif  // POLYOPS_CPU_ADD_OMP_H_
