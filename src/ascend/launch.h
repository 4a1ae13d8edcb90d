// How an Ascend implementation runs one aclnn operator: descriptors built
// once per cached instance and re-pointed on later calls, a repeatable
// executor, workspace from a per-stream pool, phase 2 on the call's stream.
#ifndef POLYOPS_ASCEND_LAUNCH_H_
#define POLYOPS_ASCEND_LAUNCH_H_

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
//
// `ref`: an in-place parameter (aclnn's `*Ref`, e.g. aclnnInplaceCopy's
// selfRef). It holds an index in both the input and the output space of
// aclSet{Input,Output}TensorAddr, and a re-pointed call sets both (the
// double's mapping; never checked on a real toolkit, ASCEND.md §7).
//
// Several launches of one call can share scratch operands (intermediates:
// one launch writes what the next reads) when each Run passes the same
// scratch_bytes: the stream's pool keeps its contents when it grows, and
// every workspace sits after the scratch area. Work from another host
// thread on the same stream between those launches would reuse the area,
// so such ops assume one host thread per stream (docs/ascend.md).
struct Operand {
  Tensor view;
  bool input = true;
  int64_t scratch_offset = -1;
  bool ref = false;

  static Operand In(const Tensor& view) { return {view, true, -1}; }
  static Operand Out(const Tensor& view) { return {view, false, -1}; }
  static Operand Scratch(const Tensor& shape_and_dtype, int64_t offset) {
    return {shape_and_dtype, false, offset};
  }
  static Operand Ref(const Tensor& view) { return {view, true, -1, true}; }
  // A scratch intermediate read by this launch.
  static Operand ScratchIn(const Tensor& shape_and_dtype, int64_t offset) {
    return {shape_and_dtype, true, offset};
  }
  // A scratch intermediate written in place (e.g. aclnnInplaceCopy's
  // selfRef).
  static Operand ScratchRef(const Tensor& shape_and_dtype, int64_t offset) {
    return {shape_and_dtype, true, offset, true};
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

// An aclIntArray owned by an instance (CANN copies the values at
// creation): host integer arrays known at construction.
class IntArrayHandle {
 public:
  explicit IntArrayHandle(std::initializer_list<int64_t> values);
  IntArrayHandle(const IntArrayHandle&) = delete;
  IntArrayHandle& operator=(const IntArrayHandle&) = delete;
  ~IntArrayHandle() {
    if (array_ && RuntimeLoaded()) GetRuntime().destroy_int_array(array_);
  }
  const AclIntArray* get() const { return array_; }

 private:
  AclIntArray* array_;
};

// 1 as the aclScalar aclnnAdd's alpha wants: float for floating tensors,
// int64 for integer ones.
AclScalar* ScalarOne(DataType dtype);

// `value` as a float aclScalar (alpha and beta of the matrix products:
// polyops rounds them to float32 as its CPU sgemm does).
AclScalar* ScalarFloat(double value);

// Device memory of at least `bytes` for work queued on `stream`, reused by
// later calls on that stream. Growing it synchronizes the stream first, so
// memory still in use by queued work is never freed, and copies the old
// contents over, so intermediates of a multi-launch op survive. Not for
// graph capture (docs/ascend.md).
void* StreamScratch(AclStream stream, uint64_t bytes);

}  // namespace polyops::ascend

#endif  // POLYOPS_ASCEND_LAUNCH_H_
