#ifndef POLYOPS_ASCEND_MUL_ACLNN_H_
#define POLYOPS_ASCEND_MUL_ACLNN_H_

#include <optional>

#include "ascend/runtime/aclnn_prepare.h"
#include "ascend/runtime/launch.h"
#include "base/mul.h"
#include "core/operator.h"

namespace polyops {

// Slot 0: aclnnMul(self, other, out), which broadcasts both operands
// (torch rules).
template <>
class Operator<Mul, Device::Type::kAscend, 0> : public Mul {
 public:
  static constexpr const char* kImplementationName = "aclnn";
  using Mul::Mul;

  void operator()(const Handle& handle, const Tensor& input,
                  const Tensor& other,
                  const std::optional<Tensor>& out) const override {
    if (out->numel() == 0) return;
    static const auto launch = ascend::Phase2("aclnnMul", "8.0.RC1");
    executor_.Run(kName, "aclnnMul", handle,
                  {ascend::Operand::In(input), ascend::Operand::In(other),
                   ascend::Operand::Out(*out)},
                  0, &ascend::PrepareMul, nullptr, launch);
  }

 private:
  mutable ascend::ExecutorCache executor_;
};

}  // namespace polyops

#endif  // POLYOPS_ASCEND_MUL_ACLNN_H_
