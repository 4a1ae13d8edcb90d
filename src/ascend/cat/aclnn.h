#ifndef POLYOPS_ASCEND_CAT_ACLNN_H_
#define POLYOPS_ASCEND_CAT_ACLNN_H_

#include <optional>
#include <vector>

#include "ascend/runtime/launch.h"
#include "base/cat.h"
#include "core/operator.h"

namespace polyops {

// Slot 0: aclnnCat(tensors, dim, out) over an aclTensorList of the pieces
// with their strides, any of the 10 dtypes. Pieces of size 0 add nothing
// and are left out of the list (which ones is fixed per instance: shapes
// are part of the cache key). The list owns its descriptors (aclDestroy-
// TensorList destroys them, trap 13); on later calls its elements are
// re-pointed with aclSetDynamicInputTensorAddr (irIndex 0, relativeIndex =
// position in the list) and the executor is reused.
template <>
class Operator<Cat, Device::Type::kAscend, 0> : public Cat {
 public:
  static constexpr const char* kImplementationName = "aclnn";

  explicit Operator(const Args& args) : Cat(args) {
    for (size_t i = 0; i < args.tensors.size(); ++i) {
      if (args.tensors[i].numel() != 0) pieces_used_.push_back(i);
    }
  }

  void operator()(const Handle& handle, const Args& args) const override {
    if (args.out->numel() == 0) return;
    static const auto launch = ascend::Phase2("aclnnCat", "8.0.RC1");
    std::vector<ascend::Operand> operands;
    operands.reserve(pieces_used_.size() + 1);
    for (size_t i : pieces_used_) {
      operands.push_back(ascend::Operand::ListIn(args.tensors[i], 0));
    }
    operands.push_back(ascend::Operand::Out(*args.out));
    executor_.Run(kName, "aclnnCat", handle, operands, 0, &Prepare,
                  const_cast<Operator*>(this), launch);
  }

 private:
  static ascend::AclnnStatus Prepare(void* self, ascend::AclTensor* const* t,
                                     uint64_t* workspace,
                                     ascend::AclOpExecutor** executor) {
    using Fn = ascend::AclnnStatus (*)(const ascend::AclTensorList*, int64_t,
                                       ascend::AclTensor*, uint64_t*,
                                       ascend::AclOpExecutor**);
    static const auto get =
        ascend::Phase1<Fn>("aclnnCatGetWorkspaceSize", "8.0.RC1");
    auto* op = static_cast<Operator*>(self);
    return get(op->executor_.list(0), op->dim_, t[op->pieces_used_.size()],
               workspace, executor);
  }

  std::vector<size_t> pieces_used_;  // indexes of the non-empty pieces
  mutable ascend::ExecutorCache executor_;
};

}  // namespace polyops

#endif  // POLYOPS_ASCEND_CAT_ACLNN_H_
