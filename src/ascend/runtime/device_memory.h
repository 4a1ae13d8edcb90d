// The per-stream pools of device memory that ExecutorCache and OneShotCall
// launch with (launch.h: scratch operands, then the workspace), shared by
// launch.cc and device_memory.cc. Not part of launch.h's interface.
#ifndef POLYOPS_ASCEND_RUNTIME_DEVICE_MEMORY_H_
#define POLYOPS_ASCEND_RUNTIME_DEVICE_MEMORY_H_

#include <cstdint>
#include <memory>
#include <mutex>

#include "ascend/runtime/cann.h"
#include "core/handle.h"

namespace polyops::ascend {

// A stream's pooled block: scratch operands, then the workspace. Its mutex
// is held from binding to the last launch of a call, so the block cannot
// move, be freed or be shared with another thread's call on the stream in
// between.
struct Pool {
  Pool(AclStream stream, int device) : stream(stream), device(device) {}

  std::mutex mutex;
  const AclStream stream;
  const int device;  // where the block lives and the stream runs
  // Under mutex:
  char* data = nullptr;
  uint64_t size = 0;
  bool launched = false;  // a launch using the block was queued
  bool retired = false;   // freed and out of the registry
  // Under the registry's mutex: when a call last took the pool.
  uint64_t last_use = 0;
};

// The pool of a call's stream, locked for the call. A pool none of whose
// launches was ever queued (its calls failed, e.g. on a handle that is not
// a stream) is freed when the call ends: nothing can still read it.
class LockedPool {
 public:
  LockedPool(const Handle& handle, const char* op);
  ~LockedPool();
  LockedPool(const LockedPool&) = delete;
  LockedPool& operator=(const LockedPool&) = delete;

  Pool& operator*() const { return *pool_; }
  Pool* operator->() const { return pool_.get(); }

 private:
  static std::shared_ptr<Pool> FindOrAdd(const Handle& handle,
                                         std::shared_ptr<Pool>* victim);

  const char* op_;
  std::shared_ptr<Pool> pool_;
  std::unique_lock<std::mutex> lock_;
};

// The pool's block grown to `bytes` (the caller holds pool.mutex and has
// queued nothing of its call yet, so the old block holds no data the call
// needs).
char* Reserve(Pool& pool, uint64_t bytes);

}  // namespace polyops::ascend

#endif  // POLYOPS_ASCEND_RUNTIME_DEVICE_MEMORY_H_
