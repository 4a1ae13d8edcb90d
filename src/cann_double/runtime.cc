// libascendcl.so of the CANN test double: runtime on host memory.
//
// "Device" memory is host memory from aligned_alloc, tracked in a registry so
// that every consumer can tell device pointers from host pointers the way
// real hardware does (a host pointer handed to a kernel faults there). Streams
// are queues that run only at synchronization points, so a host read of
// device memory without a sync sees stale data, as it does on an NPU.
#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "double.h"
#include "internal.h"

namespace cann_double {
namespace {

constexpr size_t kAlign = 32;
constexpr size_t kMaxLogRecords = 65536;
constexpr int kMemcpyHostToHost = 0;
constexpr int kMemcpyHostToDevice = 1;
constexpr int kMemcpyDeviceToHost = 2;
constexpr int kMemcpyDeviceToDevice = 3;
constexpr int kMemcpyDefault = 4;
constexpr int kMemcpyHostToBufToDevice = 5;
constexpr int kMemcpyInterDeviceToDevice = 7;

struct Block {
  size_t requested;
  size_t padded;
};

struct QueuedWork {
  std::string name;
  int64_t executor;
  Work work;
};

struct Stream {
  int64_t id;
  std::deque<QueuedWork> queue;
};

struct Context {
  int32_t device;
};

// Process-wide state. Leaked on purpose: the npu torch device and Python
// finalizers may call into the runtime during static destruction.
struct State {
  std::mutex mutex;  // guards everything below
  std::map<uintptr_t, Block> blocks;
  size_t live_bytes = 0;
  Stream default_stream{0, {}};
  std::map<int64_t, std::unique_ptr<Stream>> streams;  // by id: creation order
  std::unordered_map<const void*, Stream*> stream_by_handle;
  int64_t next_stream_id = 1;
  std::deque<std::string> log;
  bool initialized = false;
  std::vector<Context> contexts;
  // Serializes the execution of queued work between syncing threads.
  std::mutex exec_mutex;
};

State& GetState() {
  static State* state = [] {
    auto* s = new State;
    int count = 1;
    if (const char* env = std::getenv("POLYOPS_CANN_DOUBLE_DEVICE_COUNT")) {
      count = std::max(1, std::atoi(env));
    }
    s->contexts.resize(count);
    for (int i = 0; i < count; ++i) s->contexts[i].device = i;
    return s;
  }();
  return *state;
}

thread_local std::string tls_error;
thread_local int32_t tls_device = -1;
thread_local Context* tls_context = nullptr;
thread_local std::string tls_log_json;

// Requires state.mutex. The block containing p, or nullptr.
const Block* FindBlockLocked(State& state, const void* p, uintptr_t* base) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  auto it = state.blocks.upper_bound(addr);
  if (it == state.blocks.begin()) return nullptr;
  --it;
  if (addr >= it->first + it->second.padded) return nullptr;
  if (base != nullptr) *base = it->first;
  return &it->second;
}

bool IsDevicePointer(const void* p) {
  State& state = GetState();
  std::lock_guard<std::mutex> lock(state.mutex);
  return FindBlockLocked(state, p, nullptr) != nullptr;
}

// Requires state.mutex.
Stream* FindStreamLocked(State& state, aclrtStream stream) {
  if (stream == nullptr) return &state.default_stream;
  auto it = state.stream_by_handle.find(stream);
  return it == state.stream_by_handle.end() ? nullptr : it->second;
}

Stream* FindStream(State& state, aclrtStream stream) {
  std::lock_guard<std::mutex> lock(state.mutex);
  return FindStreamLocked(state, stream);
}

void AppendJsonString(std::string& out, const std::string& text) {
  out += '"';
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  out += '"';
}

// Runs the queued work of one stream (requires exec_mutex, not mutex).
// Returns the first error of the executed items.
int DrainStream(State& state, Stream* stream) {
  int first_error = kSuccess;
  for (;;) {
    QueuedWork item;
    {
      std::lock_guard<std::mutex> lock(state.mutex);
      if (stream->queue.empty()) break;
      item = std::move(stream->queue.front());
      stream->queue.pop_front();
    }
    const int status = item.work();
    if (status != kSuccess) {
      LogRecord record;
      record.function = item.name;
      record.phase = 3;
      record.stream = stream->id;
      record.executor = item.executor;
      record.status = status;
      Log(record);
      if (first_error == kSuccess) first_error = status;
    }
  }
  return first_error;
}

int DrainAll(State& state) {
  std::lock_guard<std::mutex> exec(state.exec_mutex);
  std::vector<Stream*> streams;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    streams.push_back(&state.default_stream);
    for (auto& entry : state.streams) streams.push_back(entry.second.get());
  }
  int first_error = kSuccess;
  for (Stream* stream : streams) {
    const int status = DrainStream(state, stream);
    if (first_error == kSuccess) first_error = status;
  }
  return first_error;
}

int LogRuntime(const char* function, int status, LogRecord record = {}) {
  record.function = function;
  record.phase = 0;
  record.status = status;
  Log(record);
  return status;
}

int Fail(const char* function, int code, const std::string& message,
         LogRecord record = {}) {
  SetError(code, std::string(function) + ": " + message);
  return LogRuntime(function, code, record);
}

// Checks one side of a copy: a device side must lie inside a live block, a
// host side must not be device memory.
bool CheckSide(const char* function, const char* side, const void* p,
               size_t bytes, bool device, std::string* message) {
  if (device) {
    if (!IsDeviceRange(p, bytes)) {
      *message = std::string(side) +
                 (IsDevicePointer(p)
                      ? " range runs past the end of its aclrtMalloc block"
                      : " is not device memory from aclrtMalloc");
      return false;
    }
  } else if (IsDevicePointer(p)) {
    *message =
        std::string(side) + " is device memory but the memcpy kind says host";
    return false;
  }
  (void)function;
  return true;
}

// Validates a memcpy; on success returns kSuccess and whether each side is on
// the device.
int CheckMemcpy(const char* function, void* dst, size_t dest_max,
                const void* src, size_t count, int kind, LogRecord& record) {
  record.kind = kind;
  record.bytes = static_cast<int64_t>(count);
  if (dst == nullptr || src == nullptr) {
    return Fail(function, kAclInvalidParam, "dst or src is NULL", record);
  }
  if (count > dest_max) {
    return Fail(function, kAclInvalidParam,
                "count " + std::to_string(count) + " exceeds destMax " +
                    std::to_string(dest_max),
                record);
  }
  bool dst_device;
  bool src_device;
  switch (kind) {
    case kMemcpyHostToHost:
      dst_device = src_device = false;
      break;
    case kMemcpyHostToDevice:
    case kMemcpyHostToBufToDevice:
      dst_device = true;
      src_device = false;
      break;
    case kMemcpyDeviceToHost:
      dst_device = false;
      src_device = true;
      break;
    case kMemcpyDeviceToDevice:
    case 6:
    case kMemcpyInterDeviceToDevice:
      dst_device = src_device = true;
      break;
    case kMemcpyDefault:
      dst_device = IsDevicePointer(dst);
      src_device = IsDevicePointer(src);
      break;
    default:
      return Fail(function, kAclInvalidParam,
                  "unknown aclrtMemcpyKind " + std::to_string(kind), record);
  }
  std::string message;
  if (!CheckSide(function, "dst", dst, count, dst_device, &message) ||
      !CheckSide(function, "src", src, count, src_device, &message)) {
    return Fail(function, kAclInvalidParam,
                message + " (kind " + std::to_string(kind) + ")", record);
  }
  return kSuccess;
}

}  // namespace

void Log(LogRecord record) {
  if (record.status != kSuccess && record.error.empty()) {
    record.error = tls_error;
  }
  std::string json = "{\"function\": ";
  AppendJsonString(json, record.function);
  json += ", \"phase\": " + std::to_string(record.phase);
  if (record.workspace >= 0) {
    json += ", \"workspace\": " + std::to_string(record.workspace);
  }
  if (record.stream >= -1) {
    json += ", \"stream\": " + std::to_string(record.stream);
  }
  if (record.executor >= 0) {
    json += ", \"executor\": " + std::to_string(record.executor);
  }
  if (record.kind >= 0) json += ", \"kind\": " + std::to_string(record.kind);
  if (record.bytes >= 0) json += ", \"bytes\": " + std::to_string(record.bytes);
  json += ", \"status\": " + std::to_string(record.status);
  if (!record.error.empty()) {
    json += ", \"error\": ";
    AppendJsonString(json, record.error);
  }
  json += '}';
  State& state = GetState();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (state.log.size() >= kMaxLogRecords) state.log.pop_front();
  state.log.push_back(std::move(json));
}

int SetError(int code, const std::string& message) {
  tls_error = message;
  return code;
}

std::string LastError() { return tls_error; }

bool IsDeviceRange(const void* p, size_t bytes) {
  State& state = GetState();
  std::lock_guard<std::mutex> lock(state.mutex);
  uintptr_t base = 0;
  const Block* block = FindBlockLocked(state, p, &base);
  if (block == nullptr) return false;
  return reinterpret_cast<uintptr_t>(p) - base + bytes <= block->padded;
}

bool IsLiveStream(aclrtStream stream) {
  State& state = GetState();
  std::lock_guard<std::mutex> lock(state.mutex);
  return FindStreamLocked(state, stream) != nullptr;
}

int64_t StreamId(aclrtStream stream) {
  State& state = GetState();
  std::lock_guard<std::mutex> lock(state.mutex);
  const Stream* s = FindStreamLocked(state, stream);
  return s == nullptr ? -1 : s->id;
}

bool Enqueue(aclrtStream stream, std::string name, int64_t executor,
             Work work) {
  State& state = GetState();
  std::lock_guard<std::mutex> lock(state.mutex);
  Stream* s = FindStreamLocked(state, stream);
  if (s == nullptr) return false;
  s->queue.push_back({std::move(name), executor, std::move(work)});
  return true;
}

}  // namespace cann_double

using namespace cann_double;  // NOLINT: the C entry points below

DOUBLE_API aclError aclInit(const char* /*configPath*/) {
  State& state = GetState();
  bool repeated;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    repeated = state.initialized;
    state.initialized = true;
  }
  if (repeated) {
    return Fail("aclInit", kAclRepeatInitialize,
                "aclInit can be called only once in a process");
  }
  return LogRuntime("aclInit", kSuccess);
}

DOUBLE_API aclError aclFinalize() {
  State& state = GetState();
  bool was_initialized;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    was_initialized = state.initialized;
    state.initialized = false;
  }
  if (!was_initialized) {
    return Fail("aclFinalize", kAclRepeatFinalize,
                "aclFinalize without a preceding aclInit");
  }
  return LogRuntime("aclFinalize", DrainAll(state));
}

DOUBLE_API aclError aclrtGetDeviceCount(uint32_t* count) {
  if (count == nullptr) {
    return Fail("aclrtGetDeviceCount", kAclInvalidParam, "count is NULL");
  }
  *count = static_cast<uint32_t>(GetState().contexts.size());
  return kSuccess;
}

DOUBLE_API aclError aclrtSetDevice(int32_t deviceId) {
  State& state = GetState();
  if (deviceId < 0 || deviceId >= static_cast<int32_t>(state.contexts.size())) {
    return Fail("aclrtSetDevice", kRtInvalidDeviceId,
                "device " + std::to_string(deviceId) + " does not exist (" +
                    std::to_string(state.contexts.size()) + " devices)");
  }
  tls_device = deviceId;
  tls_context = &state.contexts[deviceId];
  return LogRuntime("aclrtSetDevice", kSuccess);
}

DOUBLE_API aclError aclrtResetDevice(int32_t deviceId) {
  State& state = GetState();
  if (deviceId < 0 || deviceId >= static_cast<int32_t>(state.contexts.size())) {
    return Fail("aclrtResetDevice", kRtInvalidDeviceId,
                "device " + std::to_string(deviceId) + " does not exist");
  }
  const int status = DrainAll(state);
  if (tls_device == deviceId) {
    tls_device = -1;
    tls_context = nullptr;
  }
  return LogRuntime("aclrtResetDevice", status);
}

DOUBLE_API aclError aclrtGetDevice(int32_t* deviceId) {
  if (deviceId == nullptr) {
    return Fail("aclrtGetDevice", kAclInvalidParam, "deviceId is NULL");
  }
  if (tls_device < 0) {
    return Fail("aclrtGetDevice", kRtContextNull,
                "no device is set on this thread (aclrtSetDevice)");
  }
  *deviceId = tls_device;
  return kSuccess;
}

DOUBLE_API aclError aclrtGetCurrentContext(aclrtContext* context) {
  if (context == nullptr) {
    return Fail("aclrtGetCurrentContext", kAclInvalidParam, "context is NULL");
  }
  if (tls_context == nullptr) {
    return Fail("aclrtGetCurrentContext", kRtContextNull,
                "no context on this thread (aclrtSetDevice first)");
  }
  *context = tls_context;
  return kSuccess;
}

DOUBLE_API aclError aclrtSetCurrentContext(aclrtContext context) {
  State& state = GetState();
  for (Context& c : state.contexts) {
    if (&c == context) {
      tls_context = &c;
      tls_device = c.device;
      return LogRuntime("aclrtSetCurrentContext", kSuccess);
    }
  }
  return Fail("aclrtSetCurrentContext", kAclInvalidParam,
              "not a context of this runtime");
}

DOUBLE_API aclError aclrtMalloc(void** devPtr, size_t size, int policy) {
  LogRecord record;
  record.bytes = static_cast<int64_t>(size);
  if (devPtr == nullptr) {
    return Fail("aclrtMalloc", kAclInvalidParam, "devPtr is NULL", record);
  }
  if (size == 0) {
    return Fail("aclrtMalloc", kAclInvalidParam, "size is 0", record);
  }
  if ((policy & 0xff) > 7) {
    return Fail("aclrtMalloc", kAclInvalidParam,
                "unknown aclrtMemMallocPolicy " + std::to_string(policy),
                record);
  }
  // "real alloc size is aligned to 32 bytes and padded with 32 bytes".
  const size_t padded = (size + kAlign - 1) / kAlign * kAlign + kAlign;
  void* p = std::aligned_alloc(kAlign, padded);
  if (p == nullptr) {
    return Fail("aclrtMalloc", kAclBadAlloc, "out of host memory", record);
  }
  // Fresh device memory holds garbage: 0xFF is NaN in every float format, so
  // reading memory nobody wrote shows up in results.
  std::memset(p, 0xff, padded);
  State& state = GetState();
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    state.blocks[reinterpret_cast<uintptr_t>(p)] = {size, padded};
    state.live_bytes += size;
  }
  *devPtr = p;
  return LogRuntime("aclrtMalloc", kSuccess, record);
}

DOUBLE_API aclError aclrtFree(void* devPtr) {
  State& state = GetState();
  LogRecord record;
  bool found = false;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    auto it = state.blocks.find(reinterpret_cast<uintptr_t>(devPtr));
    if (it != state.blocks.end()) {
      found = true;
      record.bytes = static_cast<int64_t>(it->second.requested);
      state.live_bytes -= it->second.requested;
      state.blocks.erase(it);
    }
  }
  if (!found) {
    return Fail("aclrtFree", kAclInvalidParam,
                devPtr == nullptr ? std::string("devPtr is NULL")
                                  : "not the start of a live aclrtMalloc block",
                record);
  }
  // Queued work that still references the block finds it gone when it runs
  // and reports an error at the synchronization point instead of touching
  // freed memory.
  std::free(devPtr);
  return LogRuntime("aclrtFree", kSuccess, record);
}

DOUBLE_API aclError aclrtMallocHost(void** hostPtr, size_t size) {
  if (hostPtr == nullptr || size == 0) {
    return Fail("aclrtMallocHost", kAclInvalidParam, "hostPtr NULL or size 0");
  }
  *hostPtr = std::aligned_alloc(64, (size + 63) / 64 * 64);
  if (*hostPtr == nullptr) {
    return Fail("aclrtMallocHost", kAclBadAlloc, "out of host memory");
  }
  return LogRuntime("aclrtMallocHost", kSuccess);
}

DOUBLE_API aclError aclrtFreeHost(void* hostPtr) {
  if (hostPtr == nullptr || IsDevicePointer(hostPtr)) {
    return Fail("aclrtFreeHost", kAclInvalidParam,
                "NULL or device memory (use aclrtFree)");
  }
  std::free(hostPtr);
  return LogRuntime("aclrtFreeHost", kSuccess);
}

DOUBLE_API aclError aclrtMemcpy(void* dst, size_t destMax, const void* src,
                                size_t count, int kind) {
  LogRecord record;
  const int status =
      CheckMemcpy("aclrtMemcpy", dst, destMax, src, count, kind, record);
  if (status != kSuccess) return status;
  // Synchronous: everything queued before runs first.
  const int queued = DrainAll(GetState());
  if (queued != kSuccess) return LogRuntime("aclrtMemcpy", queued, record);
  // The device side was checked before the drain; queued work cannot free.
  std::memmove(dst, src, count);
  return LogRuntime("aclrtMemcpy", kSuccess, record);
}

DOUBLE_API aclError aclrtMemcpyAsync(void* dst, size_t destMax, const void* src,
                                     size_t count, int kind,
                                     aclrtStream stream) {
  LogRecord record;
  record.stream = StreamId(stream);
  const int status =
      CheckMemcpy("aclrtMemcpyAsync", dst, destMax, src, count, kind, record);
  if (status != kSuccess) return status;
  const bool dst_device = IsDevicePointer(dst);
  const bool src_device = IsDevicePointer(src);
  const bool queued = Enqueue(
      stream, "aclrtMemcpyAsync", -1,
      [dst, src, count, dst_device, src_device]() {
        // A block freed after the enqueue must not be touched.
        if ((dst_device && !IsDeviceRange(dst, count)) ||
            (src_device && !IsDeviceRange(src, count))) {
          return SetError(kRtInternalError,
                          "aclrtMemcpyAsync: device memory was freed before "
                          "the copy ran");
        }
        std::memmove(dst, src, count);
        return kSuccess;
      });
  if (!queued) {
    return Fail("aclrtMemcpyAsync", kAclInvalidParam, "not a live stream",
                record);
  }
  return LogRuntime("aclrtMemcpyAsync", kSuccess, record);
}

namespace {

int CheckMemset(const char* function, void* dev_ptr, size_t max_count,
                size_t count, LogRecord& record) {
  record.bytes = static_cast<int64_t>(count);
  if (dev_ptr == nullptr || count > max_count) {
    return Fail(function, kAclInvalidParam,
                "devPtr is NULL or count exceeds maxCount", record);
  }
  if (IsDevicePointer(dev_ptr) && !IsDeviceRange(dev_ptr, count)) {
    return Fail(function, kAclInvalidParam,
                "range runs past the end of its aclrtMalloc block", record);
  }
  return kSuccess;
}

}  // namespace

DOUBLE_API aclError aclrtMemset(void* devPtr, size_t maxCount, int32_t value,
                                size_t count) {
  LogRecord record;
  const int status =
      CheckMemset("aclrtMemset", devPtr, maxCount, count, record);
  if (status != kSuccess) return status;
  if (IsDevicePointer(devPtr)) {
    const int queued = DrainAll(GetState());
    if (queued != kSuccess) return LogRuntime("aclrtMemset", queued, record);
  }
  std::memset(devPtr, value, count);
  return LogRuntime("aclrtMemset", kSuccess, record);
}

DOUBLE_API aclError aclrtMemsetAsync(void* devPtr, size_t maxCount,
                                     int32_t value, size_t count,
                                     aclrtStream stream) {
  LogRecord record;
  record.stream = StreamId(stream);
  int status = CheckMemset("aclrtMemsetAsync", devPtr, maxCount, count, record);
  if (status != kSuccess) return status;
  if (!IsDevicePointer(devPtr)) {
    return Fail("aclrtMemsetAsync", kAclInvalidParam,
                "devPtr is not device memory", record);
  }
  if (!Enqueue(stream, "aclrtMemsetAsync", -1, [devPtr, value, count]() {
        if (!IsDeviceRange(devPtr, count)) {
          return SetError(kRtInternalError,
                          "aclrtMemsetAsync: memory freed before it ran");
        }
        std::memset(devPtr, value, count);
        return kSuccess;
      })) {
    return Fail("aclrtMemsetAsync", kAclInvalidParam, "not a live stream",
                record);
  }
  return LogRuntime("aclrtMemsetAsync", kSuccess, record);
}

DOUBLE_API aclError aclrtCreateStream(aclrtStream* stream) {
  if (stream == nullptr) {
    return Fail("aclrtCreateStream", kAclInvalidParam, "stream is NULL");
  }
  State& state = GetState();
  LogRecord record;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    auto s = std::make_unique<Stream>();
    s->id = state.next_stream_id++;
    record.stream = s->id;
    state.stream_by_handle[s.get()] = s.get();
    *stream = s.get();
    state.streams[s->id] = std::move(s);
  }
  return LogRuntime("aclrtCreateStream", kSuccess, record);
}

DOUBLE_API aclError aclrtDestroyStream(aclrtStream stream) {
  State& state = GetState();
  LogRecord record;
  Stream* s = stream == nullptr ? nullptr : FindStream(state, stream);
  if (s == nullptr) {
    return Fail("aclrtDestroyStream", kAclInvalidParam,
                "not a stream created by aclrtCreateStream (or destroyed)",
                record);
  }
  record.stream = s->id;
  int status;
  {
    std::lock_guard<std::mutex> exec(state.exec_mutex);
    status = DrainStream(state, s);
    std::lock_guard<std::mutex> lock(state.mutex);
    state.stream_by_handle.erase(stream);
    state.streams.erase(s->id);
  }
  return LogRuntime("aclrtDestroyStream", status, record);
}

DOUBLE_API aclError aclrtSynchronizeStream(aclrtStream stream) {
  State& state = GetState();
  LogRecord record;
  Stream* s = FindStream(state, stream);
  if (s == nullptr) {
    record.stream = -1;
    return Fail("aclrtSynchronizeStream", kAclInvalidParam, "not a live stream",
                record);
  }
  record.stream = s->id;
  int status;
  {
    std::lock_guard<std::mutex> exec(state.exec_mutex);
    status = DrainStream(state, s);
  }
  return LogRuntime("aclrtSynchronizeStream", status, record);
}

DOUBLE_API aclError aclrtSynchronizeDevice(void) {
  return LogRuntime("aclrtSynchronizeDevice", DrainAll(GetState()));
}

DOUBLE_API const char* aclGetRecentErrMsg() { return tls_error.c_str(); }

DOUBLE_API aclError aclsysGetVersionStr(char* pkgName, char* versionStr) {
  if (pkgName == nullptr || versionStr == nullptr) {
    return Fail("aclsysGetVersionStr", kAclInvalidParam,
                "pkgName or versionStr is NULL");
  }
  const char* env = std::getenv("POLYOPS_CANN_DOUBLE_VERSION");
  const char* version = env != nullptr && *env != '\0' ? env : "8.5.0";
  // ACL_PKG_VERSION_MAX_SIZE is 128 including the terminator.
  std::snprintf(versionStr, 128, "%s", version);
  return kSuccess;
}

DOUBLE_API const char* polyopsDoubleCallLog(void) {
  State& state = GetState();
  std::string json = "[";
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    bool first = true;
    for (const std::string& record : state.log) {
      if (!first) json += ", ";
      first = false;
      json += record;
    }
  }
  json += ']';
  tls_log_json = std::move(json);
  return tls_log_json.c_str();
}

DOUBLE_API void polyopsDoubleClearCallLog(void) {
  State& state = GetState();
  std::lock_guard<std::mutex> lock(state.mutex);
  state.log.clear();
}

DOUBLE_API int polyopsDoubleIsDevicePointer(const void* p) {
  return IsDevicePointer(p) ? 1 : 0;
}

DOUBLE_API size_t polyopsDoubleLiveBytes(void) {
  State& state = GetState();
  std::lock_guard<std::mutex> lock(state.mutex);
  return state.live_bytes;
}

DOUBLE_API size_t polyopsDoublePendingWork(void) {
  State& state = GetState();
  std::lock_guard<std::mutex> lock(state.mutex);
  size_t pending = state.default_stream.queue.size();
  for (auto& entry : state.streams) pending += entry.second->queue.size();
  return pending;
}
