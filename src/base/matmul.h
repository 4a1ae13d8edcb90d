#ifndef POLYOPS_BASE_MATMUL_H_
#define POLYOPS_BASE_MATMUL_H_

#include <optional>

#include "base/gemm_base.h"
#include "core/handle.h"

namespace polyops {

// matmul(input, other, *, out=None) -> Tensor
//
// out = input @ other, as torch.matmul for 2-D and 3-D operands:
// [m, k] @ [k, n] -> [m, n]; [B, m, k] @ [B, k, n] -> [B, m, n]; a 2-D
// operand, or a batch of 1, is shared by every matrix of the other's batch.
// Every dtype accumulates in float32 and rounds the result once (CPU: own
// AVX-512 kernels or OpenBLAS sgemm, see docs/cpu_gemm.md).
//   input, other: 2-D or 3-D, float16, bfloat16 or float32, one dtype; each
//                 matrix row- or column-major (unit stride in one of its
//                 last two dims, e.g. x.t()); the batch dim any stride.
//   out:          the result's shape and dtype, unit stride in one of its
//                 last two dims, not overlapping input or other; allocated
//                 contiguous when omitted.
class Matmul : public GemmBase {
 public:
  static constexpr const char* kName = "matmul";
  static constexpr int kNumPositional = 2;

  Matmul(const Tensor& input, const Tensor& other,
         const std::optional<Tensor>& out = std::nullopt) {
    InitProduct(kName, "input", input, false, "other", other, false,
                std::nullopt, RequireOutput(kName, "out", out));
  }

  virtual void operator()(const Handle& handle, const Tensor& input,
                          const Tensor& other,
                          const std::optional<Tensor>& out) const = 0;

  static TensorMeta DefaultOut(const Tensor& input, const Tensor& other) {
    return ProductMeta(input, false, other, false);
  }
};

}  // namespace polyops

#endif  // POLYOPS_BASE_MATMUL_H_
