#ifndef POLYOPS_CPU_ADD_RMS_NORM_LOOP_H_
#define POLYOPS_CPU_ADD_RMS_NORM_LOOP_H_

#include <cmath>

#include "base/add_rms_norm.h"
#include "core/dispatch.h"
#include "core/operator.h"
#include "cpu/runtime/convert.h"

namespace polyops {

// Slot 0: a plain scalar loop, one row after another on one thread.
template <>
class Operator<AddRmsNorm, Device::Type::kCpu, 0> : public AddRmsNorm {
 public:
  static constexpr const char* kImplementationName = "loop";
  using AddRmsNorm::AddRmsNorm;

  void operator()(const Handle&, const Args& args) const override {
    DispatchDataType<POLYOPS_FLOAT_TYPES>(
        dtype_, "polyops.add_rms_norm", [&](auto tag) {
          using T = typename decltype(tag)::type;
          const T* g = args.gamma.data_as<T>();
          for (int64_t row = 0; row < rows_.numel; ++row) {
            int64_t at[4];
            rows_.Offsets(row, at);
            T* y = args.y_out->data_as<T>() + at[0];
            T* x = args.x_out->data_as<T>() + at[1];
            const T* a = args.x1.data_as<T>() + at[2];
            const T* b = args.x2.data_as<T>() + at[3];
            float sum = 0.0f;
            for (int64_t i = 0; i < hidden_; ++i) {
              cpu::Store(x + i, cpu::Load(a + i) + cpu::Load(b + i));
              const float rounded = cpu::Load(x + i);
              sum += rounded * rounded;
            }
            const float scale =
                1.0f / std::sqrt(sum / static_cast<float>(hidden_) +
                                 static_cast<float>(args.eps));
            for (int64_t i = 0; i < hidden_; ++i) {
              cpu::Store(y + i, cpu::Load(x + i) * scale * cpu::Load(g + i));
            }
          }
        });
  }
};

}  // namespace polyops

#endif  // POLYOPS_CPU_ADD_RMS_NORM_LOOP_H_
