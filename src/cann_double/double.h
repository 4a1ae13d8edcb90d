// Public extras of the CANN test double (src/cann_double/README.md).
//
// The double exports the real CANN C ABI (sources in docs/backends/ascend.md,
// listed in the README) plus the functions below, which exist only in the
// double. Tests and the test "npu" torch device resolve them with dlsym from
// libascendcl.so; code that must also run on real CANN must treat them as
// optional (dlsym returns NULL there).
#ifndef POLYOPS_CANN_DOUBLE_DOUBLE_H_
#define POLYOPS_CANN_DOUBLE_DOUBLE_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// The call log as a JSON array of records
//   {"function": "aclnnAddGetWorkspaceSize", "phase": 1, "workspace": 4096,
//    "stream": 0, "executor": 7, "status": 0, ...}
// phase 0 = runtime call, 1 = GetWorkspaceSize, 2 = launch, 3 = queued work
// that failed when it ran at a synchronization point. Optional keys: "kind"
// (aclrtMemcpy*), "bytes", "error" (the message of a failed call). "stream"
// is 0 for the default (null) stream, 1, 2, ... for streams in creation
// order, -1 for a handle that is not a live stream. The returned string is
// owned by the calling thread and valid until its next call.
const char* polyopsDoubleCallLog(void);

// Empties the call log (the log keeps at most 65536 records, oldest dropped).
void polyopsDoubleClearCallLog(void);

// 1 if p points into a live aclrtMalloc block (any address inside it), else 0.
int polyopsDoubleIsDevicePointer(const void* p);

// Sum of the sizes requested from aclrtMalloc over the live blocks.
size_t polyopsDoubleLiveBytes(void);

// Number of queued, not yet executed work items over all streams.
size_t polyopsDoublePendingWork(void);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // POLYOPS_CANN_DOUBLE_DOUBLE_H_
