// Integer index tensors the attention ops take (sequence offsets and
// lengths, block tables): int32, what serving engines keep, or int64, what
// torch.tensor([...]) makes. Kernels read either width and compare values
// as int64, so a value that no int32 can hold is out of range like any
// other, never wrapped into range.
#ifndef POLYOPS_BASE_INDEX_TENSORS_H_
#define POLYOPS_BASE_INDEX_TENSORS_H_

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/checks.h"

namespace polyops {

inline void CheckIndexDtype(const char* op, const char* name,
                            const Tensor& tensor) {
  POLYOPS_CHECK(
      tensor.dtype() == DataType::kInt32 || tensor.dtype() == DataType::kInt64,
      "polyops.", op, ": ", name, " must have dtype int32 or int64, got ",
      DataTypeName(tensor.dtype()));
}

// The first `count` entries of a contiguous int32 or int64 array in host
// memory, widened to int64. Each entry is read once (one memcpy): the array
// is caller memory another thread may change while a call runs without the
// GIL, so what is checked afterwards is what is used.
inline std::vector<int64_t> WidenIndices(const void* data, DataType dtype,
                                         int64_t count) {
  std::vector<int64_t> values(static_cast<size_t>(count));
  if (count == 0) return values;
  if (dtype == DataType::kInt64) {
    std::memcpy(values.data(), data, values.size() * sizeof(int64_t));
  } else {
    std::vector<int32_t> narrow(values.size());
    std::memcpy(narrow.data(), data, narrow.size() * sizeof(int32_t));
    values.assign(narrow.begin(), narrow.end());
  }
  return values;
}

}  // namespace polyops

#endif  // POLYOPS_BASE_INDEX_TENSORS_H_
