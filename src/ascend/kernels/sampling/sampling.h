// Phase 1 of the aclnn APIs that topk_topp_sampling's Ascend slot chains
// around aclnnApplyTopKTopP (src/ascend/topk_topp_sampling/aclnn.h), one
// PrepareFn each, tensors in the order of each API's signature. The
// attention slots use the clamp and the int32 cast for int64 block tables
// (src/ascend/kernels/attention/attention.h). Which of these prototypes were
// read from CANN headers or docs and which are unverified is listed in
// docs/backends/ascend.md.
#ifndef POLYOPS_ASCEND_KERNELS_SAMPLING_SAMPLING_H_
#define POLYOPS_ASCEND_KERNELS_SAMPLING_SAMPLING_H_

#include <cstdint>
#include <limits>

#include "ascend/runtime/launch.h"

namespace polyops::ascend::sampling {

// Two aclScalars a phase 1 takes: Clamp's bounds, Rsubs' other and alpha.
struct ScalarPair {
  const AclScalar* first = nullptr;
  const AclScalar* second = nullptr;
};

// aclnnCast(self = t[0], dtype, out = t[1]).
inline AclnnStatus Cast(AclTensor* const* t, AclDataType dtype,
                        uint64_t* workspace, AclOpExecutor** executor) {
  using Fn = AclnnStatus (*)(const AclTensor*, AclDataType, AclTensor*,
                             uint64_t*, AclOpExecutor**);
  static const auto get = Phase1<Fn>("aclnnCastGetWorkspaceSize", "8.0.RC1");
  return get(t[0], dtype, t[1], workspace, executor);
}
inline AclnnStatus PrepareCastFloat(void*, AclTensor* const* t,
                                    uint64_t* workspace,
                                    AclOpExecutor** executor) {
  return Cast(t, AclDataType::kFloat, workspace, executor);
}
inline AclnnStatus PrepareCastInt32(void*, AclTensor* const* t,
                                    uint64_t* workspace,
                                    AclOpExecutor** executor) {
  return Cast(t, AclDataType::kInt32, workspace, executor);
}

// aclnnNanToNum(self = t[0], nan, posinf, neginf, out = t[1]).
inline AclnnStatus NanToNum(AclTensor* const* t, float nan, float posinf,
                            float neginf, uint64_t* workspace,
                            AclOpExecutor** executor) {
  using Fn = AclnnStatus (*)(const AclTensor*, float, float, float, AclTensor*,
                             uint64_t*, AclOpExecutor**);
  static const auto get =
      Phase1<Fn>("aclnnNanToNumGetWorkspaceSize", "8.0.RC1");
  return get(t[0], nan, posinf, neginf, t[1], workspace, executor);
}
// Logits: NaN and -inf to -FLT_MAX, +inf to FLT_MAX (finite, so that the
// softmaxes after give the contract's bad-row masses without inf - inf).
inline AclnnStatus PrepareNanToNumLogits(void*, AclTensor* const* t,
                                         uint64_t* workspace,
                                         AclOpExecutor** executor) {
  constexpr float kMax = std::numeric_limits<float>::max();
  return NanToNum(t, -kMax, kMax, -kMax, workspace, executor);
}
// top_p: NaN and +inf filter nothing (1), -inf keeps the top token (0).
inline AclnnStatus PrepareNanToNumP(void*, AclTensor* const* t,
                                    uint64_t* workspace,
                                    AclOpExecutor** executor) {
  return NanToNum(t, 1.0f, 1.0f, 0.0f, workspace, executor);
}

// aclnnFlip(self = t[0], dims, out = t[1]); the context is the dims'
// IntArrayHandle.
inline AclnnStatus PrepareFlip(void* dims, AclTensor* const* t,
                               uint64_t* workspace, AclOpExecutor** executor) {
  using Fn = AclnnStatus (*)(const AclTensor*, const AclIntArray*, AclTensor*,
                             uint64_t*, AclOpExecutor**);
  static const auto get = Phase1<Fn>("aclnnFlipGetWorkspaceSize", "8.0.RC1");
  return get(t[0], static_cast<IntArrayHandle*>(dims)->get(), t[1], workspace,
             executor);
}

// aclnnSort(self = t[0], stable = true, dim = -1, descending = false,
// valuesOut = t[1], indicesOut = t[2]).
inline AclnnStatus PrepareStableSortAscending(void*, AclTensor* const* t,
                                              uint64_t* workspace,
                                              AclOpExecutor** executor) {
  using Fn = AclnnStatus (*)(const AclTensor*, bool, int64_t, bool, AclTensor*,
                             AclTensor*, uint64_t*, AclOpExecutor**);
  static const auto get = Phase1<Fn>("aclnnSortGetWorkspaceSize", "8.0.RC1");
  return get(t[0], /*stable=*/true, /*dim=*/-1, /*descending=*/false, t[1],
             t[2], workspace, executor);
}

// aclnnClamp(self = t[0], clipValueMin, clipValueMax, out = t[1]); the
// context is a ScalarPair (min, max).
inline AclnnStatus PrepareClamp(void* bounds, AclTensor* const* t,
                                uint64_t* workspace, AclOpExecutor** executor) {
  using Fn =
      AclnnStatus (*)(const AclTensor*, const AclScalar*, const AclScalar*,
                      AclTensor*, uint64_t*, AclOpExecutor**);
  static const auto get = Phase1<Fn>("aclnnClampGetWorkspaceSize", "8.0.RC1");
  const auto* pair = static_cast<ScalarPair*>(bounds);
  return get(t[0], pair->first, pair->second, t[1], workspace, executor);
}

// aclnnApplyTopKTopP(logits = t[0], p = t[1], k = t[2], out = t[3]): p
// before k.
inline AclnnStatus PrepareApplyTopKTopP(void*, AclTensor* const* t,
                                        uint64_t* workspace,
                                        AclOpExecutor** executor) {
  using Fn =
      AclnnStatus (*)(const AclTensor*, const AclTensor*, const AclTensor*,
                      AclTensor*, uint64_t*, AclOpExecutor**);
  static const auto get =
      Phase1<Fn>("aclnnApplyTopKTopPGetWorkspaceSize", "8.2.RC1.alpha003");
  return get(t[0], t[1], t[2], t[3], workspace, executor);
}

// aclnnSoftmax(self = t[0], dim = -1, out = t[1]).
inline AclnnStatus PrepareSoftmaxLastDim(void*, AclTensor* const* t,
                                         uint64_t* workspace,
                                         AclOpExecutor** executor) {
  using Fn = AclnnStatus (*)(const AclTensor*, int64_t, AclTensor*, uint64_t*,
                             AclOpExecutor**);
  static const auto get = Phase1<Fn>("aclnnSoftmaxGetWorkspaceSize", "8.0.RC1");
  return get(t[0], -1, t[1], workspace, executor);
}

// aclnnCumsum(self = t[0], dim = 1, dtype = FLOAT, out = t[1]).
inline AclnnStatus PrepareCumsumRows(void*, AclTensor* const* t,
                                     uint64_t* workspace,
                                     AclOpExecutor** executor) {
  using Fn = AclnnStatus (*)(const AclTensor*, int64_t, AclDataType, AclTensor*,
                             uint64_t*, AclOpExecutor**);
  static const auto get = Phase1<Fn>("aclnnCumsumGetWorkspaceSize", "8.0.RC1");
  return get(t[0], 1, AclDataType::kFloat, t[1], workspace, executor);
}

// aclnnRsubs(self = t[0], other, alpha, out = t[1]) = other - alpha * self;
// the context is a ScalarPair (other, alpha).
inline AclnnStatus PrepareRsubs(void* scalars, AclTensor* const* t,
                                uint64_t* workspace, AclOpExecutor** executor) {
  using Fn =
      AclnnStatus (*)(const AclTensor*, const AclScalar*, const AclScalar*,
                      AclTensor*, uint64_t*, AclOpExecutor**);
  static const auto get = Phase1<Fn>("aclnnRsubsGetWorkspaceSize", "8.0.RC1");
  const auto* pair = static_cast<ScalarPair*>(scalars);
  return get(t[0], pair->first, pair->second, t[1], workspace, executor);
}

// aclnnSearchSorted(sortedSequence = t[0], self = t[1], outInt32 = false,
// right = false, sorter = NULL, out = t[2]). sorter is the last input, so
// leaving it NULL shifts no address-setter index.
inline AclnnStatus PrepareSearchSortedLeft(void*, AclTensor* const* t,
                                           uint64_t* workspace,
                                           AclOpExecutor** executor) {
  using Fn =
      AclnnStatus (*)(const AclTensor*, const AclTensor*, bool, bool,
                      const AclTensor*, AclTensor*, uint64_t*, AclOpExecutor**);
  static const auto get =
      Phase1<Fn>("aclnnSearchSortedGetWorkspaceSize", "8.0.RC1");
  return get(t[0], t[1], /*outInt32=*/false, /*right=*/false, nullptr, t[2],
             workspace, executor);
}

// aclnnGather(self = t[0], dim = 1, index = t[1], out = t[2]).
inline AclnnStatus PrepareGatherRows(void*, AclTensor* const* t,
                                     uint64_t* workspace,
                                     AclOpExecutor** executor) {
  using Fn = AclnnStatus (*)(const AclTensor*, int64_t, const AclTensor*,
                             AclTensor*, uint64_t*, AclOpExecutor**);
  static const auto get = Phase1<Fn>("aclnnGatherGetWorkspaceSize", "8.0.RC1");
  return get(t[0], 1, t[1], t[2], workspace, executor);
}

}  // namespace polyops::ascend::sampling

#endif  // POLYOPS_ASCEND_KERNELS_SAMPLING_SAMPLING_H_
