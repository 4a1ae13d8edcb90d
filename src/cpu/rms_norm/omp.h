#ifndef POLYOPS_CPU_RMS_NORM_OMP_H_
#define POLYOPS_CPU_RMS_NORM_OMP_H_

#include <cmath>

#include "base/rms_norm.h"
#include "core/dispatch.h"
#include "core/operator.h"
#include "cpu/row_kernels.h"

namespace polyops {

// Slot 1: rows spread over OpenMP threads, each row in vectorized blocks.
// A row is read twice (sum of squares, then scale); the second read hits
// cache for any realistic hidden size.
template <>
class Operator<RmsNorm, Device::Type::kCpu, 1> : public RmsNorm {
 public:
  static constexpr const char* kImplementationName = "omp";
  using RmsNorm::RmsNorm;

  void operator()(const Handle&, const Tensor& input, const Tensor& weight,
                  double eps, const std::optional<Tensor>& out) const override {
    DispatchDataType<POLYOPS_FLOAT_TYPES>(
        dtype_, "polyops.rms_norm", [&](auto tag) {
          using T = typename decltype(tag)::type;
          const T* w = weight.data_as<T>();
          T* y_base = out->data_as<T>();
          const T* x_base = input.data_as<T>();
          const int64_t rows = rows_.numel;
          const int64_t hidden = hidden_;
          const float eps_f = static_cast<float>(eps);
          cpu::ParallelFor(
              rows, rows * hidden >= cpu::kParallelGrain, [&](int64_t row) {
                int64_t at[2];
                rows_.Offsets(row, at);
                const T* x = x_base + at[1];
                float buffer[cpu::kBlock];
                float sum = 0.0f;
                for (int64_t begin = 0; begin < hidden; begin += cpu::kBlock) {
                  const int64_t n = std::min(cpu::kBlock, hidden - begin);
                  sum +=
                      cpu::SumOfSquares(cpu::StageIn(x + begin, buffer, n), n);
                }
                const float scale =
                    1.0f / std::sqrt(sum / static_cast<float>(hidden) + eps_f);
                cpu::ScaleRow(x, w, scale, y_base + at[0], hidden);
              });
        });
  }
};

template <>
struct DefaultImplementation<RmsNorm, Device::Type::kCpu> {
  static constexpr int kIndex = 1;
};

}  // namespace polyops

#endif  // POLYOPS_CPU_RMS_NORM_OMP_H_
