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

  void operator()(const Handle& handle, const Args& args) const override {
    if (args.out->numel() == 0) return;
    static const auto launch = ascend::Phase2("aclnnMul", "8.0.RC1");
    executor_.Run(
        kName, "aclnnMul", handle,
        {ascend::Operand::In(args.input), ascend::Operand::In(args.other),
         ascend::Operand::Out(*args.out)},
        0, &ascend::PrepareMul, nullptr, launch);
  }

 private:
  mutable ascend::ExecutorCache executor_;
};

}  // namespace polyops

#endif  // POLYOPS_ASCEND_MUL_ACLNN_H_
