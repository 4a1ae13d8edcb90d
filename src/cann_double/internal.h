// Internal interface between the three libraries of the CANN test double.
//
// libascendcl.so owns the process-wide state (device-memory registry, stream
// queues, thread-local error text, call log); libnnopbase.so and libopapi.so
// reach it through these C++ functions, exported with default visibility
// but not part of the CANN ABI.
#ifndef POLYOPS_CANN_DOUBLE_INTERNAL_H_
#define POLYOPS_CANN_DOUBLE_INTERNAL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#define DOUBLE_API extern "C" __attribute__((visibility("default")))
#define DOUBLE_INTERNAL __attribute__((visibility("default")))

typedef int aclError;
typedef int32_t aclnnStatus;
typedef void* aclrtStream;
typedef void* aclrtContext;

namespace cann_double {

// aclError (acl_base_rt.h, rt_error_codes.h).
constexpr int kSuccess = 0;
constexpr int kAclInvalidParam = 100000;
constexpr int kAclUninitialize = 100001;
constexpr int kAclRepeatInitialize = 100002;
constexpr int kAclRepeatFinalize = 100037;
constexpr int kAclBadAlloc = 200000;
constexpr int kAclUnaligned = 200003;
constexpr int kRtParamInvalid = 107000;
constexpr int kRtInvalidDeviceId = 107001;
constexpr int kRtContextNull = 107002;
// Queued work that failed when it ran (a kernel fault on real hardware).
constexpr int kRtInternalError = 507899;
// aclnnStatus (acl_meta.h and the op docs).
constexpr int kNullptr = 161001;
constexpr int kParamInvalid = 161002;
constexpr int kTilingError = 561002;
constexpr int kInnerNullptr = 561103;

// One call-log record; empty/negative fields are left out of the JSON.
struct LogRecord {
  std::string function;
  int phase = 0;
  int64_t workspace = -1;
  int64_t stream = -2;  // -2: no stream field
  int64_t executor = -1;
  int status = 0;
  int kind = -1;
  int64_t bytes = -1;
  std::string error;
};

// Appends a record; a nonzero status attaches the thread's last error text.
DOUBLE_INTERNAL void Log(LogRecord record);

// Sets the thread's aclGetRecentErrMsg text and returns code.
DOUBLE_INTERNAL int SetError(int code, const std::string& message);
DOUBLE_INTERNAL std::string LastError();

// True if [p, p + bytes) lies inside one live aclrtMalloc block.
DOUBLE_INTERNAL bool IsDeviceRange(const void* p, size_t bytes);

// Stream handles: nullptr is the default stream (id 0).
DOUBLE_INTERNAL bool IsLiveStream(aclrtStream stream);
DOUBLE_INTERNAL int64_t StreamId(aclrtStream stream);

// Queues work on a stream; it runs at the next synchronization point that
// covers the stream. The work returns 0 or an error code (with SetError
// called), reported by that synchronization call. False if the stream is not
// live.
using Work = std::function<int()>;
DOUBLE_INTERNAL bool Enqueue(aclrtStream stream, std::string name,
                             int64_t executor, Work work);

}  // namespace cann_double

#endif  // POLYOPS_CANN_DOUBLE_INTERNAL_H_
