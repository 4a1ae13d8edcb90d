#ifndef POLYOPS_CPU_RMS_NORM_OMP_H_
#define POLYOPS_CPU_RMS_NORM_OMP_H_

#include <type_traits>

#include "base/rms_norm.h"
#include "core/dispatch.h"
#include "core/operator.h"
#include "cpu/kernels/rows/avx2_rows.h"
#include "cpu/kernels/rows/avx512_rows.h"
#include "cpu/kernels/rows/row_kernels.h"

namespace polyops {
namespace cpu {

// `y_stage`, when given, receives the row first and is then streamed to y.
template <typename T>
POLYOPS_INLINE void RmsNormRow(const T* x, const float* w, T* y, int64_t hidden,
                               float eps, float* stage, T* y_stage) {
  NormalizeStagedRow(StageIn(x, stage, hidden), w, y_stage ? y_stage : y,
                     hidden, eps, stage);
  if (y_stage) StreamStore(y, y_stage, hidden * sizeof(T));
}

POLYOPS_ROW_KERNEL_VARIANTS(RmsNormRow,
                            (const T* x, const float* w, T* y, int64_t hidden,
                             float eps, float* stage, T* y_stage),
                            (x, w, y, hidden, eps, stage, y_stage))

}  // namespace cpu

// Slot 1: rows spread over OpenMP threads. With AVX-512 or AVX2 each row is
// read twice (sum of squares, then scale) and converted in registers, large
// outputs streamed (cpu/kernels/rows/avx512_rows.h,
// cpu/kernels/rows/avx2_rows.h); otherwise each row is staged as float once
// (converted in once, out once).
template <>
class Operator<RmsNorm, Device::Type::kCpu, 1> : public RmsNorm {
 public:
  static constexpr const char* kImplementationName = "omp";
  using RmsNorm::RmsNorm;

  void operator()(const Handle&, const Args& args) const override {
    DispatchDataType<POLYOPS_FLOAT_TYPES>(
        dtype_, "polyops.rms_norm", [&](auto tag) {
          using T = typename decltype(tag)::type;
          const T* w = args.weight.data_as<T>();
          T* y = args.out->data_as<T>();
          const T* x = args.input.data_as<T>();
          const int64_t hidden = hidden_;
          const float eps_f = static_cast<float>(args.eps);
          const bool parallel = rows_.numel * hidden >= cpu::kParallelGrain;
          if (hidden > cpu::kMaxStagedRow) {
            cpu::ParallelFor(rows_.numel, parallel, [&](int64_t row) {
              int64_t at[2];
              rows_.Offsets(row, at);
              cpu::NormalizeBlockedRow(x + at[1], w, y + at[0], hidden, eps_f);
            });
            return;
          }
          float w_stage[cpu::kMaxStagedRow];  // converted once per call
          const float* ws = cpu::StageIn(w, w_stage, hidden);
          const bool stream =
              rows_.numel * hidden * int64_t{sizeof(T)} >= cpu::kStreamingBytes;
#if defined(POLYOPS_HAVE_AVX512_ROWS) && defined(POLYOPS_HAVE_AVX2_ROWS)
          // row_fn(x, w, y, hidden, eps, stream, next row's x or nullptr).
          auto run = [&](auto row_fn) {
            cpu::ParallelForStreaming(rows_.numel, parallel, [&](int64_t row) {
              int64_t at[2], next[2];
              rows_.Offsets(row, at);
              const bool last = row + 1 == rows_.numel;
              if (!last) rows_.Offsets(row + 1, next);
              row_fn(x + at[1], ws, y + at[0], hidden, eps_f, stream,
                     last ? nullptr : x + next[1]);
            });
          };
          if (cpu::HasAvx512()) {
            if (std::is_same_v<T, BFloat16> && cpu::HasAvx512Bf16()) {
              run(&cpu::RmsNormRow512<T, true>);
            } else {
              run(&cpu::RmsNormRow512<T, false>);
            }
            return;
          }
          if (cpu::HasAvx2()) {
            // A no-op but for bfloat16, whose ws is w_stage.
            cpu::PairOrderWeights<T>(w_stage, hidden);
            run(&cpu::RmsNormRow256<T>);
            return;
          }
#endif
          const auto row_kernel = cpu::RmsNormRowForCpu<T>();
          cpu::ParallelFor(rows_.numel, parallel, [&](int64_t row) {
            int64_t at[2];
            rows_.Offsets(row, at);
            float stage[cpu::kMaxStagedRow];
            T y_stage[cpu::kMaxStagedRow];
            row_kernel(x + at[1], ws, y + at[0], hidden, eps_f, stage,
                       stream ? y_stage : nullptr);
          });
        });
  }
};

}  // namespace polyops

#endif  // POLYOPS_CPU_RMS_NORM_OMP_H_
