// Row-wise building blocks of the normalization kernels: each walks one row
// in kBlock pieces staged as float (direct pointers for float32).
#ifndef POLYOPS_CPU_ROW_KERNELS_H_
#define POLYOPS_CPU_ROW_KERNELS_H_

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cpu/convert.h"
#include "cpu/elementwise.h"

namespace polyops::cpu {

// A float view of src[begin, begin + n): the data itself for float32,
// else `buffer` filled by conversion.
template <typename T>
inline const float* StageIn(const T* src, float* buffer, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    return src;
  } else {
    LoadBlock(src, 1, buffer, n);
    return buffer;
  }
}

inline float SumOfSquares(const float* x, int64_t n) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += x[i] * x[i];
  return sum;
}

// y = x * scale * w over one row.
template <typename T>
inline void ScaleRow(const T* x, const T* w, float scale, T* y,
                     int64_t hidden) {
  float x_buffer[kBlock], w_buffer[kBlock], y_buffer[kBlock];
  for (int64_t begin = 0; begin < hidden; begin += kBlock) {
    const int64_t n = std::min(kBlock, hidden - begin);
    const float* xs = StageIn(x + begin, x_buffer, n);
    const float* ws = StageIn(w + begin, w_buffer, n);
    float* ys;
    if constexpr (std::is_same_v<T, float>) {
      ys = y + begin;
    } else {
      ys = y_buffer;
    }
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) ys[i] = xs[i] * scale * ws[i];
    if constexpr (!std::is_same_v<T, float>) StoreBlock(ys, y + begin, 1, n);
  }
}

}  // namespace polyops::cpu

#endif  // POLYOPS_CPU_ROW_KERNELS_H_
