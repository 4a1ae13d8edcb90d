#ifndef POLYOPS_CPU_MUL_OMP_H_
#define POLYOPS_CPU_MUL_OMP_H_

#include <type_traits>

#include "base/mul.h"
#include "core/dispatch.h"
#include "core/operator.h"
#include "cpu/kernels/elementwise/binary_vector.h"
#include "cpu/kernels/elementwise/elementwise.h"

namespace polyops {

// Slot 0: blocked, vectorized, OpenMP over blocks for large tensors.
template <>
class Operator<Mul, Device::Type::kCpu, 0> : public Mul {
 public:
  static constexpr const char* kImplementationName = "omp";
  using Mul::Mul;

  void operator()(const Handle&, const Args& args) const override {
    DispatchDataType<POLYOPS_INTEGER_TYPES, POLYOPS_ALL_FLOAT_TYPES>(
        dtype_, "polyops.mul", [&](auto tag) {
          using T = typename decltype(tag)::type;
          using C = cpu::ComputeType<T>;
          // With AVX-512 or AVX2 and unit inner strides, floats take one loop
          // that converts in registers
          // (cpu/kernels/elementwise/binary_vector.h). Otherwise 16-bit floats
          // convert in and out of every block: built per ISA (F16C, AVX-512
          // shifts and rounding), not for the SSE2 baseline.
          constexpr bool kIsaVariants = !std::is_same_v<T, C>;
          void* const data[3] = {args.out->data(), args.input.data(),
                                 args.other.data()};
          if (cpu::TryBinaryVector<cpu::BinaryOp::kMul, T>(layout_, data))
            return;
          cpu::MapBlocks<T, 3, kIsaVariants>(
              layout_, data, {0, 0, 0},
              /*parallel=*/true, [](C* y, const C* const* x, int64_t n) {
                for (int64_t i = 0; i < n; ++i) {
                  y[i] = cpu::WrappingMul(x[0][i], x[1][i]);
                }
              });
        });
  }
};

}  // namespace polyops

#endif  // POLYOPS_CPU_MUL_OMP_H_
