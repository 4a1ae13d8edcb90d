#ifndef POLYOPS_CPU_ADD_RMS_NORM_OMP_H_
#define POLYOPS_CPU_ADD_RMS_NORM_OMP_H_

#include <cmath>

#include "base/add_rms_norm.h"
#include "core/dispatch.h"
#include "core/operator.h"
#include "cpu/row_kernels.h"

namespace polyops {

// Slot 1: rows spread over OpenMP threads, each row in vectorized blocks:
// pass 1 writes x = x1 + x2 and sums the squares of x as stored (rounded),
// pass 2 scales x (cache-hot) into y.
template <>
class Operator<AddRmsNorm, Device::Type::kCpu, 1> : public AddRmsNorm {
 public:
  static constexpr const char* kImplementationName = "omp";
  using AddRmsNorm::AddRmsNorm;

  void operator()(const Handle&, const Tensor& x1, const Tensor& x2,
                  const Tensor& gamma, double eps,
                  const std::optional<Tensor>& y_out,
                  const std::optional<Tensor>& x_out) const override {
    DispatchDataType<POLYOPS_FLOAT_TYPES>(
        dtype_, "polyops.add_rms_norm", [&](auto tag) {
          using T = typename decltype(tag)::type;
          const T* g = gamma.data_as<T>();
          const int64_t rows = rows_.numel;
          const int64_t hidden = hidden_;
          const float eps_f = static_cast<float>(eps);
          cpu::ParallelFor(
              rows, rows * hidden >= cpu::kParallelGrain, [&](int64_t row) {
                int64_t at[4];
                rows_.Offsets(row, at);
                T* x = x_out->data_as<T>() + at[1];
                const T* a = x1.data_as<T>() + at[2];
                const T* b = x2.data_as<T>() + at[3];
                float a_buffer[cpu::kBlock], b_buffer[cpu::kBlock];
                float sum_buffer[cpu::kBlock];
                float sum = 0.0f;
                for (int64_t begin = 0; begin < hidden; begin += cpu::kBlock) {
                  const int64_t n = std::min(cpu::kBlock, hidden - begin);
                  const float* as = cpu::StageIn(a + begin, a_buffer, n);
                  const float* bs = cpu::StageIn(b + begin, b_buffer, n);
#pragma omp simd
                  for (int64_t i = 0; i < n; ++i) sum_buffer[i] = as[i] + bs[i];
                  cpu::StoreBlock(sum_buffer, x + begin, 1, n);
                  // Square what was stored, so y matches rms_norm(x_out).
                  sum += cpu::SumOfSquares(
                      cpu::StageIn(x + begin, sum_buffer, n), n);
                }
                const float scale =
                    1.0f / std::sqrt(sum / static_cast<float>(hidden) + eps_f);
                cpu::ScaleRow<T>(x, g, scale, y_out->data_as<T>() + at[0],
                                 hidden);
              });
        });
  }
};

template <>
struct DefaultImplementation<AddRmsNorm, Device::Type::kCpu> {
  static constexpr int kIndex = 1;
};

}  // namespace polyops

#endif  // POLYOPS_CPU_ADD_RMS_NORM_OMP_H_
