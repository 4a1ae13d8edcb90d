#ifndef POLYOPS_CPU_CAUSAL_SOFTMAX_OMP_H_
#define POLYOPS_CPU_CAUSAL_SOFTMAX_OMP_H_

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "base/causal_softmax.h"
#include "core/dispatch.h"
#include "core/operator.h"
#include "cpu/avx512_rows.h"
#include "cpu/row_kernels.h"
#include "cpu/vector_exp.h"

namespace polyops {
namespace cpu {

// Sixteen partial maxima / sums: one chain would wait on latency.
POLYOPS_INLINE float RowMax(const float* x, int64_t n) {
  constexpr int kLanes = 16;
  float partial[kLanes];
  for (int lane = 0; lane < kLanes; ++lane) partial[lane] = x[0];
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int lane = 0; lane < kLanes; ++lane) {
      partial[lane] = std::max(partial[lane], x[i + lane]);
    }
  }
  float result = x[0];
  for (; i < n; ++i) result = std::max(result, x[i]);
  for (int lane = 0; lane < kLanes; ++lane) {
    result = std::max(result, partial[lane]);
  }
  return result;
}

// e[i] = exp(x[i] - max) (e may be x), returns their sum.
POLYOPS_INLINE float ExpShiftSum(const float* x, float max, float* e,
                                 int64_t n) {
  constexpr int kLanes = 16;
  float partial[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int lane = 0; lane < kLanes; ++lane) {
      e[i + lane] = VectorExp(x[i + lane] - max);
      partial[lane] += e[i + lane];
    }
  }
  float sum = 0.0f;
  for (; i < n; ++i) {
    e[i] = VectorExp(x[i] - max);
    sum += e[i];
  }
  for (int lane = 0; lane < kLanes; ++lane) sum += partial[lane];
  return sum;
}

// One row: softmax of x[0, visible), zeros in y[visible, k). `stage` holds
// kMaxStagedRow floats; longer rows take three blocked passes instead.
template <typename T>
POLYOPS_INLINE void CausalSoftmaxRow(const T* x, T* y, int64_t k,
                                     int64_t visible, float* stage) {
  if (visible < k) {
    std::memset(static_cast<void*>(y + visible), 0,
                sizeof(T) * static_cast<size_t>(k - visible));
  }
  if (visible == 0) return;
  if (visible <= kMaxStagedRow) {
    LoadBlock(x, 1, stage, visible);
    const float max = RowMax(stage, visible);
    const float inverse = 1.0f / ExpShiftSum(stage, max, stage, visible);
    for (int64_t i = 0; i < visible; ++i) stage[i] *= inverse;
    StoreBlock(stage, y, 1, visible);
    return;
  }
  float max = Load(x);
  for (int64_t begin = 0; begin < visible; begin += kBlock) {
    const int64_t n = std::min(kBlock, visible - begin);
    LoadBlock(x + begin, 1, stage, n);
    max = std::max(max, RowMax(stage, n));
  }
  float sum = 0.0f;
  for (int64_t begin = 0; begin < visible; begin += kBlock) {
    const int64_t n = std::min(kBlock, visible - begin);
    LoadBlock(x + begin, 1, stage, n);
    sum += ExpShiftSum(stage, max, stage, n);
  }
  const float inverse = 1.0f / sum;
  for (int64_t begin = 0; begin < visible; begin += kBlock) {
    const int64_t n = std::min(kBlock, visible - begin);
    LoadBlock(x + begin, 1, stage, n);
    ExpShiftSum(stage, max, stage, n);
    for (int64_t i = 0; i < n; ++i) stage[i] *= inverse;
    StoreBlock(stage, y + begin, 1, n);
  }
}

POLYOPS_ROW_KERNEL_VARIANTS(CausalSoftmaxRow,
                            (const T* x, T* y, int64_t k, int64_t visible,
                             float* stage),
                            (x, y, k, visible, stage))

#ifdef POLYOPS_HAVE_AVX512_ROWS
// The AVX-512 row: x converted in registers while its max is taken, exp and
// sum as CausalSoftmaxRow, then the scaled row and its zeros written in one
// pass (streamed when `stream`). Long rows take CausalSoftmaxRow.
template <typename T, bool kNativeBf16 = false>
POLYOPS_TARGET_AVX512_ROWS void CausalSoftmaxRow512(const T* x, T* y, int64_t k,
                                                    int64_t visible,
                                                    float* stage, bool stream) {
  if (visible == 0 || visible > kMaxStagedRow) {
    CausalSoftmaxRowAvx512(x, y, k, visible, stage);
    return;
  }
  const float max = StageAndMax512(x, stage, visible);
  const float inverse = 1.0f / ExpShiftSum(stage, max, stage, visible);
  ScaleAndZeroRow512<kNativeBf16>(stage, inverse, y, k, visible, stream);
}
#endif

}  // namespace cpu

// Slot 0: rows spread over OpenMP threads; each row's visible keys are
// staged as float once, with a vectorizable exp, compiled for the x86-64
// baseline, AVX2 and AVX-512 and chosen at run time. Rows longer than 16384
// keys take three blocked passes. With AVX-512, 16-bit rows are converted in
// registers and large outputs streamed (cpu/avx512_rows.h).
template <>
class Operator<CausalSoftmax, Device::Type::kCpu, 0> : public CausalSoftmax {
 public:
  static constexpr const char* kImplementationName = "omp";
  using CausalSoftmax::CausalSoftmax;

  void operator()(const Handle&, const Tensor& input,
                  const std::optional<Tensor>& out) const override {
    DispatchDataType<POLYOPS_FLOAT_TYPES>(
        dtype_, "polyops.causal_softmax", [&](auto tag) {
          using T = typename decltype(tag)::type;
          const T* x = input.data_as<const T>();
          T* y = out->data_as<T>();
          const int64_t keys = keys_;
          const bool parallel = rows_.numel * keys >= cpu::kParallelGrain;
#ifdef POLYOPS_HAVE_AVX512_ROWS
          if (cpu::HasAvx512()) {
            const bool stream =
                rows_.numel * keys * int64_t{sizeof(T)} >= cpu::kStreamingBytes;
            auto run = [&](auto native_bf16) {
              cpu::ParallelFor(rows_.numel, parallel, [&](int64_t row) {
                int64_t at[2];
                rows_.Offsets(row, at);
                float stage[cpu::kMaxStagedRow];
                cpu::CausalSoftmaxRow512<T, decltype(native_bf16)::value>(
                    x + at[1], y + at[0], keys, VisibleKeys(row), stage,
                    stream);
              });
            };
            if (std::is_same_v<T, BFloat16> && cpu::HasAvx512Bf16()) {
              run(std::true_type{});
            } else {
              run(std::false_type{});
            }
            return;
          }
#endif
          const auto row_kernel = cpu::CausalSoftmaxRowForCpu<T>();
          cpu::ParallelFor(rows_.numel, parallel, [&](int64_t row) {
            int64_t at[2];
            rows_.Offsets(row, at);
            float stage[cpu::kMaxStagedRow];
            row_kernel(x + at[1], y + at[0], keys, VisibleKeys(row), stage);
          });
        });
  }
};

}  // namespace polyops

#endif  // POLYOPS_CPU_CAUSAL_SOFTMAX_OMP_H_
