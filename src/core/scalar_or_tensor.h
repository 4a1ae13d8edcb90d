#ifndef POLYOPS_CORE_SCALAR_OR_TENSOR_H_
#define POLYOPS_CORE_SCALAR_OR_TENSOR_H_

#include <optional>

#include "core/cache_key.h"
#include "core/tensor.h"

namespace polyops {

// An argument that is either one number for the whole batch or a tensor of
// per-row values (e.g. topk_topp_sampling's top_k / top_p).
struct ScalarOrTensor {
  std::optional<Tensor> tensor;
  double scalar = 0.0;  // meaningful when !tensor
};

inline void AppendKey(CacheKey& key, const ScalarOrTensor& value) {
  AppendKey(key, value.tensor);
  if (!value.tensor) AppendKey(key, value.scalar);
}

}  // namespace polyops

#endif  // POLYOPS_CORE_SCALAR_OR_TENSOR_H_
