// Copies between device tensors that several Ascend ops chain before their
// main launch: aclnnInplaceCopy (selfRef <- src, broadcasting src, any
// dtypes) and aclnnCast (a helper header: it declares no op).
#ifndef POLYOPS_ASCEND_COPY_H_
#define POLYOPS_ASCEND_COPY_H_

#include <cstdint>

#include "ascend/aclnn_prepare.h"
#include "ascend/launch.h"
#include "core/handle.h"

namespace polyops::ascend {

// dst <- src through aclnnInplaceCopy; dst is Operand::Ref or ScratchRef.
// `scratch_bytes` is the calling op's scratch area (the same in each of its
// launches, Operand).
inline void RunCopy(ExecutorCache& executor, const char* op,
                    const Handle& handle, const Operand& dst,
                    const Operand& src, int64_t scratch_bytes) {
  static const auto launch = Phase2("aclnnInplaceCopy", "8.0.RC1");
  executor.Run(op, "aclnnInplaceCopy", handle, {dst, src}, scratch_bytes,
               &PrepareInplaceCopy, nullptr, launch);
}

// out <- src converted to out's dtype, through aclnnCast.
inline void RunCast(ExecutorCache& executor, const char* op,
                    const Handle& handle, const Operand& src,
                    const Operand& out, int64_t scratch_bytes) {
  using Fn = AclnnStatus (*)(const AclTensor*, AclDataType, AclTensor*,
                             uint64_t*, AclOpExecutor**);
  struct Phase {
    static AclnnStatus Prepare(void* context, AclTensor* const* t,
                               uint64_t* workspace, AclOpExecutor** made) {
      static const auto get =
          Phase1<Fn>("aclnnCastGetWorkspaceSize", "8.0.RC1");
      return get(t[0], *static_cast<const AclDataType*>(context), t[1],
                 workspace, made);
    }
  };
  static const auto launch = Phase2("aclnnCast", "8.0.RC1");
  AclDataType dtype = ToAcl(out.view.dtype());
  executor.Run(op, "aclnnCast", handle, {src, out}, scratch_bytes,
               &Phase::Prepare, &dtype, launch);
}

}  // namespace polyops::ascend

#endif  // POLYOPS_ASCEND_COPY_H_
