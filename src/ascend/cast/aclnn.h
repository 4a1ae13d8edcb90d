#ifndef POLYOPS_ASCEND_CAST_ACLNN_H_
#define POLYOPS_ASCEND_CAST_ACLNN_H_

#include <optional>

#include "ascend/runtime/aclnn_prepare.h"
#include "ascend/runtime/launch.h"
#include "base/cast.h"
#include "core/operator.h"

namespace polyops {

// Slot 0: aclnnCast(self, dtype, out).
template <>
class Operator<Cast, Device::Type::kAscend, 0> : public Cast {
 public:
  static constexpr const char* kImplementationName = "aclnn";
  using Cast::Cast;

  void operator()(const Handle& handle, const Args& args) const override {
    if (args.out->numel() == 0) return;
    static const auto launch = ascend::Phase2("aclnnCast", "8.0.RC1");
    ascend::AclDataType dtype = ascend::ToAcl(args.out->dtype());
    executor_.Run(
        kName, "aclnnCast", handle,
        {ascend::Operand::In(args.input), ascend::Operand::Out(*args.out)}, 0,
        &ascend::PrepareCast, &dtype, launch);
  }

 private:
  mutable ascend::ExecutorCache executor_;
};

}  // namespace polyops

#endif  // POLYOPS_ASCEND_CAST_ACLNN_H_
