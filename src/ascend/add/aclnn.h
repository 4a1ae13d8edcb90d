#ifndef POLYOPS_ASCEND_ADD_ACLNN_H_
#define POLYOPS_ASCEND_ADD_ACLNN_H_

#include <optional>

#include "ascend/runtime/launch.h"
#include "base/add.h"
#include "core/operator.h"

namespace polyops {

// Slot 0: aclnnAdd(self, other, alpha, out), which broadcasts both operands
// (torch rules). alpha goes in as base/add.h rounded it (DOUBLE for
// float64, FLOAT, INT64 for integers); whether CANN fuses float64's
// x + alpha * y into one rounding, as the other devices do, was never
// checked on a real toolkit (the double does).
template <>
class Operator<Add, Device::Type::kAscend, 0> : public Add {
 public:
  static constexpr const char* kImplementationName = "aclnn";

  explicit Operator(const Args& args)
      : Add(args), alpha_scalar_(ascend::ScalarOf(dtype_, alpha_)) {}

  void operator()(const Handle& handle, const Args& args) const override {
    if (args.out->numel() == 0) return;
    static const auto launch = ascend::Phase2("aclnnAdd", "8.0.RC1");
    executor_.Run(
        kName, "aclnnAdd", handle,
        {ascend::Operand::In(args.input), ascend::Operand::In(args.other),
         ascend::Operand::Out(*args.out)},
        0, &Prepare, const_cast<Operator*>(this), launch);
  }

 private:
  static ascend::AclnnStatus Prepare(void* self, ascend::AclTensor* const* t,
                                     uint64_t* workspace,
                                     ascend::AclOpExecutor** executor) {
    using Fn = ascend::AclnnStatus (*)(
        const ascend::AclTensor*, const ascend::AclTensor*,
        const ascend::AclScalar*, ascend::AclTensor*, uint64_t*,
        ascend::AclOpExecutor**);
    static const auto get =
        ascend::Phase1<Fn>("aclnnAddGetWorkspaceSize", "8.0.RC1");
    return get(t[0], t[1], static_cast<Operator*>(self)->alpha_scalar_.get(),
               t[2], workspace, executor);
  }

  ascend::ScalarHandle alpha_scalar_;
  mutable ascend::ExecutorCache executor_;
};

}  // namespace polyops

#endif  // POLYOPS_ASCEND_ADD_ACLNN_H_
