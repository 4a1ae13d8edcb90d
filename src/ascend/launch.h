// How an Ascend implementation runs one aclnn operator: descriptors built
// once per cached instance and re-pointed on later calls, a repeatable
// executor, workspace from a per-stream pool, phase 2 on the call's stream.
#ifndef POLYOPS_ASCEND_LAUNCH_H_
#define POLYOPS_ASCEND_LAUNCH_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <vector>

#include "ascend/cann.h"
#include "core/handle.h"
#include "core/tensor.h"

namespace polyops::ascend {

AclDataType ToAcl(DataType dtype);

// One tensor argument of an aclnn call. An input or output view of the
// caller's, or `scratch`: polyops-owned device memory (rms_norm's rstd)
// placed in the stream's pool at byte offset `scratch_offset`.
struct Operand {
  Tensor view;
  bool input = true;
  int64_t scratch_offset = -1;

  static Operand In(const Tensor& view) { return {view, true, -1}; }
  static Operand Out(const Tensor& view) { return {view, false, -1}; }
  static Operand Scratch(const Tensor& shape_and_dtype, int64_t offset) {
    return {shape_and_dtype, false, offset};
  }
};

// Phase 1, given the descriptors in operand order: returns the aclnn status
// of the op's GetWorkspaceSize.
using PrepareFn = AclnnStatus (*)(void* context, AclTensor* const* tensors,
                                  uint64_t* workspace_size,
                                  AclOpExecutor** executor);
// Phase 2: aclnnXxx(workspace, size, executor, stream).
using LaunchFn = AclnnStatus (*)(void* workspace, uint64_t workspace_size,
                                 AclOpExecutor* executor, AclStream stream);

// The descriptors and executor one cached instance keeps. Instances are
// shared by threads, so a call holds the lock from re-pointing to the
// launch (the launch only enqueues work).
class ExecutorCache {
 public:
  ExecutorCache() = default;
  ExecutorCache(const ExecutorCache&) = delete;
  ExecutorCache& operator=(const ExecutorCache&) = delete;
  ~ExecutorCache();

  // Runs the op on handle.stream. `prepare(context, ...)` is called when
  // no executor fits these views (first call, or a view whose address sits
  // at another offset from 32-byte alignment, which the descriptors carry).
  void Run(const char* op, const char* api, const Handle& handle,
           std::initializer_list<Operand> operands, int64_t scratch_bytes,
           PrepareFn prepare, void* context, LaunchFn launch);

 private:
  void Release();

  std::mutex mutex_;
  std::vector<AclTensor*> tensors_;
  std::vector<int64_t> offsets_;  // element offsets the descriptors hold
  AclOpExecutor* executor_ = nullptr;
  uint64_t workspace_size_ = 0;
};

// An aclnn operator's phase-1 (GetWorkspaceSize) function of type Fn, and
// its phase-2 function, by name; `since` is the first CANN version with it.
template <typename Fn>
Fn Phase1(const char* name, const char* since) {
  return reinterpret_cast<Fn>(OpSymbol(name, since));
}
inline LaunchFn Phase2(const char* name, const char* since) {
  return reinterpret_cast<LaunchFn>(OpSymbol(name, since));
}

// An aclScalar owned by an instance (CANN copies the value at creation).
class ScalarHandle {
 public:
  explicit ScalarHandle(AclScalar* scalar) : scalar_(scalar) {}
  ScalarHandle(const ScalarHandle&) = delete;
  ScalarHandle& operator=(const ScalarHandle&) = delete;
  ~ScalarHandle() {
    if (scalar_ && RuntimeLoaded()) GetRuntime().destroy_scalar(scalar_);
  }
  const AclScalar* get() const { return scalar_; }

 private:
  AclScalar* scalar_;
};

// 1 as the aclScalar aclnnAdd's alpha wants: float for floating tensors,
// int64 for integer ones.
AclScalar* ScalarOne(DataType dtype);

// Device memory of at least `bytes` for work queued on `stream`, reused by
// later calls on that stream. Growing it synchronizes the stream first, so
// memory still in use by queued work is never freed. Not for graph capture
// (docs/ascend.md).
void* StreamScratch(AclStream stream, uint64_t bytes);

// One call of an op whose phase 1 reads host values that change from call
// to call: aclIntArray arguments such as FusedInferAttentionScore's
// sequence lengths are copied into the executor by phase 1, so a cached
// executor would keep the first call's lengths, and an instance may keep
// nothing derived from tensor contents. Such an op makes its descriptors,
// runs phase 1 and launches a non-repeatable executor on every call (phase
// 2 frees it, trap 11). The cost is phase 1 on the host each call; the
// gain is that no aclSetInputTensorAddr index mapping is relied on (it is
// unverified for ops with optional inputs). Everything made here is
// destroyed with the object, after phase 2 has queued the work (CANN's
// executor does not read caller descriptors after phase 2 returns).
class OneShotCall {
 public:
  explicit OneShotCall(const char* op) : op_(op) {}
  OneShotCall(const OneShotCall&) = delete;
  OneShotCall& operator=(const OneShotCall&) = delete;
  ~OneShotCall();

  // A descriptor of `view` (over its 32-byte-aligned base, as
  // ExecutorCache makes them).
  AclTensor* Describe(const Tensor& view);
  // An aclTensorList of descriptors of `views`; the list owns them
  // (aclDestroyTensorList destroys its elements, trap 13).
  AclTensorList* DescribeList(std::initializer_list<Tensor> views);
  // An aclIntArray holding a copy of `values` (host memory).
  AclIntArray* IntArray(const std::vector<int64_t>& values);

  // Checks phase 1's status, then runs phase 2 of `executor` on
  // handle.stream with workspace from the stream's pool.
  void Launch(const Handle& handle, const char* api, AclnnStatus phase1,
              uint64_t workspace_size, AclOpExecutor* executor,
              LaunchFn launch);

 private:
  const char* op_;
  std::vector<AclTensor*> tensors_;
  std::vector<AclTensorList*> lists_;
  std::vector<AclIntArray*> arrays_;
};

// Copies `bytes` of device memory to the host once all work queued on
// handle.stream is done (aclrtSynchronizeStream, then a synchronous
// aclrtMemcpy): it stalls the host and cannot be captured in a graph, so
// only the fallback of ops whose caller gave no host copy (*_host) uses it.
void CopyToHost(const Handle& handle, void* host, const void* device,
                size_t bytes, const char* op);

// Device memory holding a constant of `bytes` bytes that fill(host, bytes)
// writes, made once per process, device and `name` (a synchronous
// host-to-device copy the first time) and kept until exit: for constants
// every instance shares, like FusedInferAttentionScore's 2048x2048 mask.
// The caller's current device must be `device_index`.
const void* ProcessConstant(const char* name, int device_index, size_t bytes,
                            void (*fill)(void* host, size_t bytes));

}  // namespace polyops::ascend

#endif  // POLYOPS_ASCEND_LAUNCH_H_
