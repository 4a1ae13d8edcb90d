#ifndef POLYOPS_CPU_ADD_RMS_NORM_OMP_H_
#define POLYOPS_CPU_ADD_RMS_NORM_OMP_H_

#include <type_traits>

#include "base/add_rms_norm.h"
#include "core/dispatch.h"
#include "core/operator.h"
#include "cpu/kernels/rows/avx2_rows.h"
#include "cpu/kernels/rows/avx512_rows.h"
#include "cpu/kernels/rows/row_kernels.h"

namespace polyops {
namespace cpu {

// Writes x = a + b in kBlock pieces and leaves x as stored (rounded to T)
// in xs[0, hidden) as float, ready for NormalizeStagedRow.
template <typename T>
POLYOPS_INLINE void AddRow(const T* a, const T* b, T* x, float* xs,
                           int64_t hidden) {
  float a_buffer[kBlock], b_buffer[kBlock];
  for (int64_t begin = 0; begin < hidden; begin += kBlock) {
    const int64_t n = std::min(kBlock, hidden - begin);
    const float* as = StageIn(a + begin, a_buffer, n);
    const float* bs = StageIn(b + begin, b_buffer, n);
    float* sum = xs + begin;
    for (int64_t i = 0; i < n; ++i) sum[i] = as[i] + bs[i];
    StoreBlock(sum, x + begin, 1, n);
    if constexpr (!std::is_same_v<T, float>) LoadBlock(x + begin, 1, sum, n);
  }
}

template <typename T>
POLYOPS_INLINE void AddRmsNormRow(const T* a, const T* b, const float* w, T* x,
                                  T* y, int64_t hidden, float eps,
                                  float* stage) {
  AddRow(a, b, x, stage, hidden);
  NormalizeStagedRow(stage, w, y, hidden, eps, stage);
}

POLYOPS_ROW_KERNEL_VARIANTS(AddRmsNormRow,
                            (const T* a, const T* b, const float* w, T* x, T* y,
                             int64_t hidden, float eps, float* stage),
                            (a, b, w, x, y, hidden, eps, stage))

}  // namespace cpu

// Slot 1: rows spread over OpenMP threads. Each row: x = x1 + x2 is stored
// and kept (as stored) in a stage, then normalized exactly as rms_norm's
// slot 1 does (with AVX-512 or AVX2: converted in registers, the stage of
// type T, large outputs streamed; see cpu/kernels/rows/avx512_rows.h,
// cpu/kernels/rows/avx2_rows.h).
template <>
class Operator<AddRmsNorm, Device::Type::kCpu, 1> : public AddRmsNorm {
 public:
  static constexpr const char* kImplementationName = "omp";
  using AddRmsNorm::AddRmsNorm;

  void operator()(const Handle&, const Args& args) const override {
    DispatchDataType<POLYOPS_FLOAT_TYPES>(
        dtype_, "polyops.add_rms_norm", [&](auto tag) {
          using T = typename decltype(tag)::type;
          const T* g = args.gamma.data_as<T>();
          T* y = args.y_out->data_as<T>();
          T* x = args.x_out->data_as<T>();
          const T* a = args.x1.data_as<T>();
          const T* b = args.x2.data_as<T>();
          const int64_t hidden = hidden_;
          const float eps_f = static_cast<float>(args.eps);
          const bool parallel = rows_.numel * hidden >= cpu::kParallelGrain;
          if (hidden > cpu::kMaxStagedRow) {
            cpu::ParallelFor(rows_.numel, parallel, [&](int64_t row) {
              int64_t at[4];
              rows_.Offsets(row, at);
              float unused[cpu::kBlock];
              for (int64_t begin = 0; begin < hidden; begin += cpu::kBlock) {
                const int64_t n = std::min(cpu::kBlock, hidden - begin);
                cpu::AddRow(a + at[2] + begin, b + at[3] + begin,
                            x + at[1] + begin, unused, n);
              }
              cpu::NormalizeBlockedRow<T>(x + at[1], g, y + at[0], hidden,
                                          eps_f);
            });
            return;
          }
          float w_stage[cpu::kMaxStagedRow];  // converted once per call
          const float* ws = cpu::StageIn(g, w_stage, hidden);
#if defined(POLYOPS_HAVE_AVX512_ROWS) && defined(POLYOPS_HAVE_AVX2_ROWS)
          const bool stream = 2 * rows_.numel * hidden * int64_t{sizeof(T)} >=
                              cpu::kStreamingBytes;
          // row_fn(a, b, w, x, y, hidden, eps, stage, stream, next row's a
          // and b or nullptr).
          auto run = [&](auto row_fn) {
            cpu::ParallelForStreaming(rows_.numel, parallel, [&](int64_t row) {
              int64_t at[4], next[4];
              rows_.Offsets(row, at);
              const bool last = row + 1 == rows_.numel;
              if (!last) rows_.Offsets(row + 1, next);
              T stage[cpu::kMaxStagedRow];
              row_fn(a + at[2], b + at[3], ws, x + at[1], y + at[0], hidden,
                     eps_f, stage, stream, last ? nullptr : a + next[2],
                     last ? nullptr : b + next[3]);
            });
          };
          if (cpu::HasAvx512()) {
            if (std::is_same_v<T, BFloat16> && cpu::HasAvx512Bf16()) {
              run(&cpu::AddRmsNormRow512<T, true>);
            } else {
              run(&cpu::AddRmsNormRow512<T, false>);
            }
            return;
          }
          if (cpu::HasAvx2()) {
            // A no-op but for bfloat16, whose ws is w_stage.
            cpu::PairOrderWeights<T>(w_stage, hidden);
            run(&cpu::AddRmsNormRow256<T>);
            return;
          }
#endif
          const auto row_kernel = cpu::AddRmsNormRowForCpu<T>();
          cpu::ParallelFor(rows_.numel, parallel, [&](int64_t row) {
            int64_t at[4];
            rows_.Offsets(row, at);
            float stage[cpu::kMaxStagedRow];
            row_kernel(a + at[2], b + at[3], ws, x + at[1], y + at[0], hidden,
                       eps_f, stage);
          });
        });
  }
};

}  // namespace polyops

#endif  // POLYOPS_CPU_ADD_RMS_NORM_OMP_H_
