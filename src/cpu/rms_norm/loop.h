#ifndef POLYOPS_CPU_RMS_NORM_LOOP_H_
#define POLYOPS_CPU_RMS_NORM_LOOP_H_

#include <cmath>

#include "base/rms_norm.h"
#include "core/dispatch.h"
#include "core/operator.h"
#include "cpu/runtime/convert.h"

namespace polyops {

// Slot 0: a plain scalar loop, one row after another on one thread.
template <>
class Operator<RmsNorm, Device::Type::kCpu, 0> : public RmsNorm {
 public:
  static constexpr const char* kImplementationName = "loop";
  using RmsNorm::RmsNorm;

  void operator()(const Handle&, const Args& args) const override {
    DispatchDataType<POLYOPS_FLOAT_TYPES>(
        dtype_, "polyops.rms_norm", [&](auto tag) {
          using T = typename decltype(tag)::type;
          const T* w = args.weight.data_as<T>();
          for (int64_t row = 0; row < rows_.numel; ++row) {
            int64_t at[2];
            rows_.Offsets(row, at);
            T* y = args.out->data_as<T>() + at[0];
            const T* x = args.input.data_as<T>() + at[1];
            float sum = 0.0f;
            for (int64_t i = 0; i < hidden_; ++i) {
              const float value = cpu::Load(x + i);
              sum += value * value;
            }
            const float scale =
                1.0f / std::sqrt(sum / static_cast<float>(hidden_) +
                                 static_cast<float>(args.eps));
            for (int64_t i = 0; i < hidden_; ++i) {
              cpu::Store(y + i, cpu::Load(x + i) * scale * cpu::Load(w + i));
            }
          }
        });
  }
};

}  // namespace polyops

#endif  // POLYOPS_CPU_RMS_NORM_LOOP_H_
