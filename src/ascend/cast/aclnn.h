#ifndef POLYOPS_ASCEND_CAST_ACLNN_H_
#define POLYOPS_ASCEND_CAST_ACLNN_H_

#include <optional>

#include "ascend/launch.h"
#include "base/cast.h"
#include "core/operator.h"

namespace polyops {

// Slot 0: aclnnCast(self, dtype, out).
template <>
class Operator<Cast, Device::Type::kAscend, 0> : public Cast {
 public:
  static constexpr const char* kImplementationName = "aclnn";
  using Cast::Cast;

  void operator()(const Handle& handle, const Tensor& input, DataType,
                  const std::optional<Tensor>& out) const override {
    if (out->numel() == 0) return;
    static const auto launch = ascend::Phase2("aclnnCast", "8.0.RC1");
    executor_.Run(kName, "aclnnCast", handle,
                  {ascend::Operand::In(input), ascend::Operand::Out(*out)}, 0,
                  &Prepare, const_cast<Operator*>(this), launch);
  }

 private:
  static ascend::AclnnStatus Prepare(void* self, ascend::AclTensor* const* t,
                                     uint64_t* workspace,
                                     ascend::AclOpExecutor** executor) {
    using Fn = ascend::AclnnStatus (*)(const ascend::AclTensor*,
                                       ascend::AclDataType, ascend::AclTensor*,
                                       uint64_t*, ascend::AclOpExecutor**);
    static const auto get =
        ascend::Phase1<Fn>("aclnnCastGetWorkspaceSize", "8.0.RC1");
    return get(t[0], ascend::ToAcl(static_cast<Operator*>(self)->to_), t[1],
               workspace, executor);
  }

  mutable ascend::ExecutorCache executor_;
};

}  // namespace polyops

#endif  // POLYOPS_ASCEND_CAST_ACLNN_H_
