// How an Ascend implementation runs one aclnn operator: descriptors built
// once per cached instance and re-pointed on later calls, a repeatable
// executor, workspace from a per-stream pool, phase 2 on the call's stream.
#ifndef POLYOPS_ASCEND_RUNTIME_LAUNCH_H_
#define POLYOPS_ASCEND_RUNTIME_LAUNCH_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <vector>

#include "ascend/runtime/cann.h"
#include "core/handle.h"
#include "core/tensor.h"

namespace polyops::ascend {

AclDataType ToAcl(DataType dtype);

// One tensor argument of an aclnn call. An input or output view of the
// caller's, or `scratch`: polyops-owned device memory (rms_norm's rstd, an
// intermediate between two launches of one RunSteps unit) placed in the
// stream's pool at byte offset `scratch_offset`. `ref`: an in-place (*Ref)
// parameter, both an input and an output of the executor, re-pointed in both
// index spaces. `list` >= 0: an element of the op's tensor-list parameter
// number `list` (consecutive operands with the same number form one
// aclTensorList, in order; prepare gets it from ExecutorCache::list).
struct Operand {
  Tensor view;
  bool input = true;
  int64_t scratch_offset = -1;
  bool ref = false;
  int list = -1;

  static Operand In(const Tensor& view) { return {view, true, -1}; }
  static Operand Out(const Tensor& view) { return {view, false, -1}; }
  static Operand Ref(const Tensor& view) { return {view, true, -1, true}; }
  static Operand ListIn(const Tensor& view, int list) {
    return {view, true, -1, false, list};
  }
  // Scratch operands: `shape_and_dtype` gives the view (its data is ignored).
  static Operand Scratch(const Tensor& shape_and_dtype, int64_t offset) {
    return {shape_and_dtype, false, offset};
  }
  static Operand ScratchIn(const Tensor& shape_and_dtype, int64_t offset) {
    return {shape_and_dtype, true, offset};
  }
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

class ExecutorCache;

// One aclnn launch of an op that needs several (causal_softmax: copy, masked
// fill, softmax): its executor cache, API name, operands, phase 1 and 2.
// `operands` views a braced list, which lives as long as the Step built
// from it: write Steps inside RunSteps' braces or as named variables
// (copies of a named Step are fine while it lives), never assign one from a
// temporary.
struct Step {
  ExecutorCache* cache;
  const char* api;
  std::initializer_list<Operand> operands;
  PrepareFn prepare;
  void* context;
  LaunchFn launch;
};

// The descriptors and executor one cached instance keeps. Instances are
// shared by threads, so a call holds the lock from re-pointing to the
// launch (the launch only enqueues work).
class ExecutorCache {
 public:
  ExecutorCache() = default;
  ExecutorCache(const ExecutorCache&) = delete;
  ExecutorCache& operator=(const ExecutorCache&) = delete;
  ~ExecutorCache();

  // Runs the op on handle.stream, one launch. `prepare(context, ...)` is
  // called when no executor fits these views (first call, or a view whose
  // address sits at another offset from 32-byte alignment, which the
  // descriptors carry). Scratch is the call's only while it runs: another
  // thread's call on the stream may reuse it right after, so launches that
  // pass data through scratch go in one RunSteps unit, never in two Runs.
  void Run(const char* op, const char* api, const Handle& handle,
           std::initializer_list<Operand> operands, int64_t scratch_bytes,
           PrepareFn prepare, void* context, LaunchFn launch);
  // The same with a run-time number of operands (cat's tensor list).
  void Run(const char* op, const char* api, const Handle& handle,
           const std::vector<Operand>& operands, int64_t scratch_bytes,
           PrepareFn prepare, void* context, LaunchFn launch);

  // Tensor-list parameter `index` of the executor being prepared (for
  // prepare only; the cache owns it and its tensors).
  AclTensorList* list(int index) const { return lists_.at(index); }

 private:
  friend void RunSteps(const char* op, const Handle& handle,
                       int64_t scratch_bytes, const Step* steps, size_t count);
  // A step as RunLaunches takes it.
  struct Launch {
    ExecutorCache* cache;
    const char* api;
    const Operand* operands;
    size_t count;
    PrepareFn prepare;
    void* context;
    LaunchFn launch;
  };
  static void RunLaunches(const char* op, const Handle& handle,
                          int64_t scratch_bytes, const Launch* launches,
                          size_t count);
  // Where an operand goes in the executor's address-setter index spaces.
  struct Slot {
    int64_t input = -1;    // aclSetInputTensorAddr index
    int64_t output = -1;   // aclSetOutputTensorAddr index
    int64_t ir = -1;       // list element: aclSetDynamicInputTensorAddr
    int64_t element = -1;  // irIndex and relativeIndex
    int list = -1;
  };

  // Phase 1, or re-pointing the cached executor at these views (scratch
  // operands resolved against `scratch`); returns the workspace size. The
  // caller holds mutex_.
  uint64_t Bind(const char* op, const char* api, const Operand* operands,
                size_t count, char* scratch, PrepareFn prepare, void* context);
  // Points the scratch operands at `scratch` (the pool moved).
  void MoveScratch(const char* op, const Operand* operands, size_t count,
                   char* scratch);
  void Point(const char* op, size_t i, void* base);
  void Release();

  std::mutex mutex_;
  std::vector<AclTensor*> tensors_;
  std::vector<bool> listed_;  // tensors_[i] is owned by a list
  std::vector<AclTensorList*> lists_;
  std::vector<Slot> slots_;
  std::vector<int64_t> offsets_;  // element offsets the descriptors hold
  AclOpExecutor* executor_ = nullptr;
  uint64_t workspace_size_ = 0;
};

// Runs several launches in order on handle.stream as one unit: the stream's
// pool is held for the whole sequence, so scratch operands may carry data
// from one step to the next (`scratch_bytes` is the scratch all steps
// share) even while other threads launch on the same stream, every step's
// executor is bound before the first launch, and the pool grows, if it
// must, before anything is queued. Each step needs its own ExecutorCache.
// Every op with more than one launch per call runs them this way.
void RunSteps(const char* op, const Handle& handle, int64_t scratch_bytes,
              std::initializer_list<Step> steps);
// The same for steps chosen at run time (at most kMaxSteps).
inline constexpr size_t kMaxSteps = 16;  // topk_topp_sampling chains 16
void RunSteps(const char* op, const Handle& handle, int64_t scratch_bytes,
              const Step* steps, size_t count);

// The per-stream pools (scratch and workspace). A pool is made at the
// first call on a stream handle and kept for later calls; at most
// kMaxStreamPools are kept: a call on another stream frees the least
// recently used one. A pool is freed only after its device has finished
// the work queued with it (aclrtSynchronizeDevice, so a stream destroyed
// since needs no handle), and never while a call holds it; a pool whose
// launches all failed (e.g. a handle that is not a stream) is freed at
// once. A failed synchronization throws BackendError (the fault of
// earlier work, reported there) and keeps the pool.
inline constexpr size_t kMaxStreamPools = 32;
// Frees every pool and the memory of dropped instances
// (polyops.clear_cache()); later calls make new pools. A device fault of
// earlier work met by the synchronization before the frees throws.
void ReleaseStreamPools();

// Device memory an instance owns (causal_softmax's mask). Queued work may
// still read it when the instance dies (on eviction or clear_cache), so it
// is freed later, after a synchronization of its device that can report a
// fault: by clear_cache, or by a call once a few such buffers wait.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  // Allocates `bytes` on the current device and copies `host` into it
  // (aclrtMalloc + one synchronous aclrtMemcpy).
  void Upload(const void* host, size_t bytes);
  void* data() const { return data_; }

 private:
  void* data_ = nullptr;
  int device_ = 0;
};

// `bytes` rounded up to the 512-byte boundary every scratch area (and the
// workspace after them) starts on.
inline int64_t ScratchAlign(int64_t bytes) { return (bytes + 511) / 512 * 512; }

// An aclnn operator's phase-1 (GetWorkspaceSize) function of type Fn, and
// its phase-2 function, by name; `since` is the first CANN version with it.
template <typename Fn>
Fn Phase1(const char* name, const char* since) {
  return reinterpret_cast<Fn>(OpSymbol(name, since));
}
inline LaunchFn Phase2(const char* name, const char* since) {
  return reinterpret_cast<LaunchFn>(OpSymbol(name, since));
}

// rstdOut of aclnnRmsNorm / aclnnAddRmsNorm (mandatory, never returned by
// polyops): FLOAT32, x's shape with the normalized last dim set to 1,
// contiguous; *bytes gets its size. Its data is placed in scratch per call.
inline Tensor RstdView(const Tensor& x, int64_t* bytes) {
  int64_t shape[kMaxDims];
  int64_t strides[kMaxDims];
  int64_t rows = 1;
  for (int d = x.ndim() - 1; d >= 0; --d) {
    shape[d] = d == x.ndim() - 1 ? 1 : x.size(d);
    strides[d] = rows;
    rows *= shape[d];
  }
  *bytes = rows * static_cast<int64_t>(sizeof(float));
  return Tensor::FromParts(nullptr, x.ndim(), shape, strides,
                           DataType::kFloat32, x.device());
}

// A contiguous view of `shape_of`'s shape and dtype with no data (a scratch
// operand's shape).
inline Tensor ContiguousLike(const Tensor& shape_of, int64_t* bytes) {
  int64_t strides[kMaxDims];
  int64_t numel = 1;
  for (int d = shape_of.ndim() - 1; d >= 0; --d) {
    strides[d] = numel;
    numel *= shape_of.size(d);
  }
  *bytes = numel * shape_of.element_size();
  return Tensor::FromParts(nullptr, shape_of.ndim(), shape_of.shape(), strides,
                           shape_of.dtype(), shape_of.device());
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

// `value` as the aclScalar aclnnAdd's alpha wants for tensors of `dtype`:
// DOUBLE for float64, FLOAT for the other floats (exact for a value already
// rounded to the dtype), INT64 for integers.
AclScalar* ScalarOf(DataType dtype, double value);
// A FLOAT aclScalar (masked-fill values: -inf, 0).
AclScalar* ScalarFloat(float value);

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

#endif  // POLYOPS_ASCEND_RUNTIME_LAUNCH_H_
