#ifndef POLYOPS_CPU_ADD_LOOP_H_
#define POLYOPS_CPU_ADD_LOOP_H_

#include "base/add.h"
#include "core/dispatch.h"
#include "core/operator.h"
#include "cpu/kernels/elementwise/elementwise.h"

namespace polyops {

// Slot 0: one element at a time, one thread. The reference the faster slot
// is checked against.
template <>
class Operator<Add, Device::Type::kCpu, 0> : public Add {
 public:
  static constexpr const char* kImplementationName = "loop";
  using Add::Add;

  void operator()(const Handle&, const Args& args) const override {
    DispatchDataType<POLYOPS_INTEGER_TYPES, POLYOPS_ALL_FLOAT_TYPES>(
        dtype_, "polyops.add", [&](auto tag) {
          using T = typename decltype(tag)::type;
          using C = cpu::ComputeType<T>;
          T* y = args.out->data_as<T>();
          const T* a = args.input.data_as<T>();
          const T* b = args.other.data_as<T>();
          const C alpha = cpu::AlphaAs<C>(alpha_);
          cpu::ForEachElement(layout_, [&](const int64_t (&at)[3]) {
            const C u = cpu::Load(a + at[1]);
            const C v = cpu::Load(b + at[2]);
            cpu::Store(y + at[0], alpha_is_one_
                                      ? cpu::WrappingAdd(u, v)
                                      : cpu::ScaledAdd<T>(u, v, alpha));
          });
        });
  }
};

}  // namespace polyops

#endif  // POLYOPS_CPU_ADD_LOOP_H_
