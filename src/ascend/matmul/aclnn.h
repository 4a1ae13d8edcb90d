#ifndef POLYOPS_ASCEND_MATMUL_ACLNN_H_
#define POLYOPS_ASCEND_MATMUL_ACLNN_H_

#include <optional>

#include "ascend/kernels/gemm/products.h"
#include "base/matmul.h"
#include "core/operator.h"

namespace polyops {

// Slot 0: aclnnMatmul(self, mat2, out, cubeMathType = 0), which broadcasts
// a 2-D operand (or a batch of one) over the other's batch as torch.matmul
// does. cubeMathType 0 (KEEP_DTYPE) keeps float32 in float32 (never HF32,
// docs/backends/ascend.md trap "HF32"). Row- and column-major matrices are
// passed as strided views (no copy). k == 0 gives zeros (an empty product; the
// double does so, never checked on a real toolkit).
template <>
class Operator<Matmul, Device::Type::kAscend, 0> : public Matmul {
 public:
  static constexpr const char* kImplementationName = "aclnn";
  using Matmul::Matmul;

  void operator()(const Handle& handle, const Args& args) const override {
    if (args.out->numel() == 0) return;
    // Empty operands (k == 0) may have no address: point them at out.
    const Tensor a = args.input.numel() == 0
                         ? args.input.WithData(args.out->data())
                         : args.input;
    const Tensor b = args.other.numel() == 0
                         ? args.other.WithData(args.out->data())
                         : args.other;
    ascend::RunMatmul(executor_, kName, handle, a, b, *args.out);
  }

 private:
  mutable ascend::ExecutorCache executor_;
};

}  // namespace polyops

#endif  // POLYOPS_ASCEND_MATMUL_ACLNN_H_
