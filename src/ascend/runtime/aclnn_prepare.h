// Phase 1 of aclnn APIs that several Ascend slots share as one of their
// launches (a PrepareFn each): copies and casts into scratch or outputs,
// masked fills, the product.
#ifndef POLYOPS_ASCEND_RUNTIME_ACLNN_PREPARE_H_
#define POLYOPS_ASCEND_RUNTIME_ACLNN_PREPARE_H_

#include "ascend/runtime/launch.h"

namespace polyops::ascend {

// aclnnInplaceCopy(selfRef = t[0], src = t[1]); no context.
inline AclnnStatus PrepareInplaceCopy(void*, AclTensor* const* t,
                                      uint64_t* workspace,
                                      AclOpExecutor** executor) {
  using Fn =
      AclnnStatus (*)(AclTensor*, const AclTensor*, uint64_t*, AclOpExecutor**);
  static const auto get =
      Phase1<Fn>("aclnnInplaceCopyGetWorkspaceSize", "8.0.RC1");
  return get(t[0], t[1], workspace, executor);
}

// aclnnCast(self = t[0], dtype, out = t[1]); the context points at the
// AclDataType to convert to.
inline AclnnStatus PrepareCast(void* dtype, AclTensor* const* t,
                               uint64_t* workspace, AclOpExecutor** executor) {
  using Fn = AclnnStatus (*)(const AclTensor*, AclDataType, AclTensor*,
                             uint64_t*, AclOpExecutor**);
  static const auto get = Phase1<Fn>("aclnnCastGetWorkspaceSize", "8.0.RC1");
  return get(t[0], *static_cast<const AclDataType*>(dtype), t[1], workspace,
             executor);
}

// aclnnInplaceMaskedFillScalar(selfRef = t[0], mask = t[1], value); the
// context is the value's ScalarHandle.
inline AclnnStatus PrepareInplaceMaskedFillScalar(void* value,
                                                  AclTensor* const* t,
                                                  uint64_t* workspace,
                                                  AclOpExecutor** executor) {
  using Fn = AclnnStatus (*)(AclTensor*, const AclTensor*, const AclScalar*,
                             uint64_t*, AclOpExecutor**);
  static const auto get =
      Phase1<Fn>("aclnnInplaceMaskedFillScalarGetWorkspaceSize", "8.0.RC1");
  return get(t[0], t[1], static_cast<ScalarHandle*>(value)->get(), workspace,
             executor);
}

// aclnnMul(self = t[0], other = t[1], out = t[2]); no context.
inline AclnnStatus PrepareMul(void*, AclTensor* const* t, uint64_t* workspace,
                              AclOpExecutor** executor) {
  using Fn = AclnnStatus (*)(const AclTensor*, const AclTensor*, AclTensor*,
                             uint64_t*, AclOpExecutor**);
  static const auto get = Phase1<Fn>("aclnnMulGetWorkspaceSize", "8.0.RC1");
  return get(t[0], t[1], t[2], workspace, executor);
}

// aclnnSilu(self = t[0], out = t[1]); no context.
inline AclnnStatus PrepareSilu(void*, AclTensor* const* t, uint64_t* workspace,
                               AclOpExecutor** executor) {
  using Fn =
      AclnnStatus (*)(const AclTensor*, AclTensor*, uint64_t*, AclOpExecutor**);
  static const auto get = Phase1<Fn>("aclnnSiluGetWorkspaceSize", "8.0.RC1");
  return get(t[0], t[1], workspace, executor);
}

}  // namespace polyops::ascend

#endif  // POLYOPS_ASCEND_RUNTIME_ACLNN_PREPARE_H_
