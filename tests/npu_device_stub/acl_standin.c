/*
 * STAND-IN, tests only: a minimal libascendcl.so with just the runtime
 * symbols the npu test device calls (plus the CANN double's introspection
 * extras), until the real CANN test double is in the tree. The tests compile
 * it with the system C compiler into a temporary directory; it is never built
 * by CMake nor shipped. Same C ABI as CANN (acl_rt.h) and the same behaviour
 * the double promises where the device relies on it:
 *   - device memory is host memory from a registry of 32-byte-aligned blocks;
 *     aclrtMemcpy checks destMax and that each side's pointer matches its kind;
 *   - aclrtMemcpyAsync only queues; queued work runs at
 *     aclrtSynchronizeStream / aclrtSynchronizeDevice / synchronous
 *     aclrtMemcpy / aclrtDestroyStream;
 *   - a second aclInit returns ACL_ERROR_REPEAT_INITIALIZE (100002).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int aclError;
typedef void* aclrtStream;

enum {
  kSuccess = 0,
  kInvalidParam = 100000,
  kRepeatInit = 100002,
  kBadAlloc = 200000,
  kInvalidDevice = 200002,
  kContextNull = 107002
};
enum { kH2H = 0, kH2D = 1, kD2H = 2, kD2D = 3 };

typedef struct Block {
  char* ptr;
  size_t size;
  struct Block* next;
} Block;
typedef struct Task {
  char* dst;
  const char* src;
  size_t count;
} Task;
typedef struct Stream {
  Task* tasks;
  size_t n, cap;
  struct Stream* next;
} Stream;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static Block* blocks;
static size_t live_bytes;
static int initialized;
static Stream default_stream;
static Stream* streams = &default_stream;
static char* call_log;
static size_t log_len, log_cap;
static __thread int current_device = -1;
static __thread char last_error[256];

static aclError Fail(aclError code, const char* message) {
  snprintf(last_error, sizeof last_error, "%s", message);
  return code;
}

/* Appends {"function": ..., "stream": ..., "status": ...} (mu held). */
static aclError Log(const char* function, aclrtStream stream, aclError status) {
  char record[160];
  int n = snprintf(record, sizeof record,
                   "%s{\"function\": \"%s\", \"stream\": %llu, \"status\": %d}",
                   log_len ? ", " : "", function,
                   (unsigned long long)(uintptr_t)stream, status);
  if (log_len + n + 1 > log_cap) {
    log_cap = (log_len + n + 1) * 2;
    call_log = realloc(call_log, log_cap);
  }
  memcpy(call_log + log_len, record, n + 1);
  log_len += n;
  return status;
}

/* 1 if [p, p + count) lies inside one live block (mu held). */
static int IsDevice(const void* p, size_t count) {
  for (Block* b = blocks; b; b = b->next) {
    if ((const char*)p >= b->ptr && (const char*)p + count <= b->ptr + b->size)
      return 1;
  }
  return 0;
}

static void Run(Stream* s) {
  for (size_t i = 0; i < s->n; ++i)
    memmove(s->tasks[i].dst, s->tasks[i].src, s->tasks[i].count);
  s->n = 0;
}

static void RunAll(void) {
  for (Stream* s = streams; s; s = s->next) Run(s);
}

static Stream* Find(aclrtStream handle) {
  if (!handle) return &default_stream;
  for (Stream* s = streams; s; s = s->next)
    if (s == handle) return s;
  return NULL;
}

static aclError CheckCopy(void* dst, size_t dest_max, const void* src,
                          size_t count, int kind) {
  if (!dst || !src || count > dest_max || kind < kH2H || kind > kD2D)
    return Fail(
        kInvalidParam,
        "aclrtMemcpy: bad arguments (null pointer, count > destMax or kind)");
  int dst_dev = kind == kH2D || kind == kD2D,
      src_dev = kind == kD2H || kind == kD2D;
  if (IsDevice(dst, count) != dst_dev || IsDevice(src, count) != src_dev)
    return Fail(kInvalidParam,
                "aclrtMemcpy: pointers do not match the copy kind");
  return kSuccess;
}

aclError aclInit(const char* config) {
  (void)config;
  pthread_mutex_lock(&mu);
  aclError status =
      initialized ? Fail(kRepeatInit, "aclInit: repeat initialize") : kSuccess;
  initialized = 1;
  Log("aclInit", NULL, status);
  pthread_mutex_unlock(&mu);
  return status;
}

aclError aclrtSetDevice(int32_t device) {
  if (device < 0 || device >= 8)
    return Fail(kInvalidDevice, "aclrtSetDevice: invalid device");
  current_device = device;
  return kSuccess;
}

aclError aclrtGetDevice(int32_t* device) {
  if (current_device < 0)
    return Fail(kContextNull, "aclrtGetDevice: no device set");
  *device = current_device;
  return kSuccess;
}

aclError aclrtMalloc(void** ptr, size_t size, int policy) {
  (void)policy;
  if (!ptr || size == 0)
    return Fail(kInvalidParam, "aclrtMalloc: null pointer or size 0");
  Block* b = malloc(sizeof *b);
  /* Real CANN aligns to 32 bytes and pads 32 bytes. */
  b->ptr = aligned_alloc(32, (size + 63) / 32 * 32);
  if (!b->ptr) {
    free(b);
    return Fail(kBadAlloc, "aclrtMalloc: out of memory");
  }
  b->size = size;
  pthread_mutex_lock(&mu);
  b->next = blocks;
  blocks = b;
  live_bytes += size;
  Log("aclrtMalloc", NULL, kSuccess);
  pthread_mutex_unlock(&mu);
  *ptr = b->ptr;
  return kSuccess;
}

aclError aclrtFree(void* ptr) {
  pthread_mutex_lock(&mu);
  for (Block** link = &blocks; *link; link = &(*link)->next) {
    Block* b = *link;
    if (b->ptr == ptr) {
      *link = b->next;
      live_bytes -= b->size;
      free(b->ptr);
      free(b);
      Log("aclrtFree", NULL, kSuccess);
      pthread_mutex_unlock(&mu);
      return kSuccess;
    }
  }
  pthread_mutex_unlock(&mu);
  return Fail(kInvalidParam, "aclrtFree: not a device pointer");
}

aclError aclrtMemcpy(void* dst, size_t dest_max, const void* src, size_t count,
                     int kind) {
  pthread_mutex_lock(&mu);
  RunAll();
  aclError status = CheckCopy(dst, dest_max, src, count, kind);
  if (status == kSuccess) memmove(dst, src, count);
  Log("aclrtMemcpy", NULL, status);
  pthread_mutex_unlock(&mu);
  return status;
}

aclError aclrtMemcpyAsync(void* dst, size_t dest_max, const void* src,
                          size_t count, int kind, aclrtStream stream) {
  pthread_mutex_lock(&mu);
  Stream* s = Find(stream);
  aclError status = s ? CheckCopy(dst, dest_max, src, count, kind)
                      : Fail(kInvalidParam, "aclrtMemcpyAsync: unknown stream");
  if (status == kSuccess) {
    if (s->n == s->cap) {
      s->cap = s->cap ? 2 * s->cap : 8;
      s->tasks = realloc(s->tasks, s->cap * sizeof *s->tasks);
    }
    s->tasks[s->n++] = (Task){dst, src, count};
  }
  Log("aclrtMemcpyAsync", stream, status);
  pthread_mutex_unlock(&mu);
  return status;
}

aclError aclrtMemset(void* ptr, size_t max_count, int32_t value, size_t count) {
  if (count > max_count)
    return Fail(kInvalidParam, "aclrtMemset: count > maxCount");
  pthread_mutex_lock(&mu);
  RunAll();
  memset(ptr, value, count);
  pthread_mutex_unlock(&mu);
  return kSuccess;
}

aclError aclrtCreateStream(aclrtStream* stream) {
  Stream* s = calloc(1, sizeof *s);
  pthread_mutex_lock(&mu);
  s->next = streams;
  streams = s;
  Log("aclrtCreateStream", s, kSuccess);
  pthread_mutex_unlock(&mu);
  *stream = s;
  return kSuccess;
}

aclError aclrtDestroyStream(aclrtStream stream) {
  pthread_mutex_lock(&mu);
  for (Stream** link = &streams; *link; link = &(*link)->next) {
    if (*link == stream && stream != &default_stream) {
      Stream* s = *link;
      Run(s);
      *link = s->next;
      free(s->tasks);
      free(s);
      pthread_mutex_unlock(&mu);
      return kSuccess;
    }
  }
  pthread_mutex_unlock(&mu);
  return Fail(kInvalidParam, "aclrtDestroyStream: unknown stream");
}

aclError aclrtSynchronizeStream(aclrtStream stream) {
  pthread_mutex_lock(&mu);
  Stream* s = Find(stream);
  if (s) Run(s);
  Log("aclrtSynchronizeStream", stream, s ? kSuccess : kInvalidParam);
  pthread_mutex_unlock(&mu);
  return s ? kSuccess
           : Fail(kInvalidParam, "aclrtSynchronizeStream: unknown stream");
}

aclError aclrtSynchronizeDevice(void) {
  pthread_mutex_lock(&mu);
  RunAll();
  Log("aclrtSynchronizeDevice", NULL, kSuccess);
  pthread_mutex_unlock(&mu);
  return kSuccess;
}

const char* aclGetRecentErrMsg(void) { return last_error; }

/* The CANN double's introspection extras. */
const char* polyopsDoubleCallLog(void) {
  static __thread char* copy;
  pthread_mutex_lock(&mu);
  free(copy);
  copy = malloc(log_len + 3);
  sprintf(copy, "[%s]", log_len ? call_log : "");
  pthread_mutex_unlock(&mu);
  return copy;
}

void polyopsDoubleClearCallLog(void) {
  pthread_mutex_lock(&mu);
  log_len = 0;
  pthread_mutex_unlock(&mu);
}

int polyopsDoubleIsDevicePointer(const void* ptr) {
  pthread_mutex_lock(&mu);
  int result = IsDevice(ptr, 1);
  pthread_mutex_unlock(&mu);
  return result;
}

size_t polyopsDoubleLiveBytes(void) {
  pthread_mutex_lock(&mu);
  size_t result = live_bytes;
  pthread_mutex_unlock(&mu);
  return result;
}
