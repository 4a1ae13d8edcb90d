#include "ascend/launch.h"

#include <algorithm>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>

#include "core/error.h"

namespace polyops::ascend {
namespace {

constexpr uintptr_t kAlignment = 32;  // CANN: addresses 32-byte aligned
constexpr int64_t kScratchAlignment = 512;

struct Placement {
  void* base;      // 32-byte aligned, at or below the view's first element
  int64_t offset;  // the view's first element, in elements from base
};

Placement Place(const Tensor& view, const char* op) {
  const auto address = reinterpret_cast<uintptr_t>(view.data());
  const uintptr_t base = address & ~(kAlignment - 1);
  const auto gap = static_cast<int64_t>(address - base);
  POLYOPS_CHECK(gap % view.element_size() == 0, "polyops.", op,
                ": a tensor's address is not a multiple of its element size");
  return {reinterpret_cast<void*>(base), gap / view.element_size()};
}

// CANN's view: dims, strides in elements, an element offset from the
// aligned base, and storage dims spanning the offset plus the view.
AclTensor* CreateTensor(const Runtime& rt, const Tensor& view,
                        const Placement& place, const char* op) {
  int64_t extent = place.offset + 1;
  for (int d = 0; d < view.ndim(); ++d) {
    extent += (view.size(d) - 1) * view.stride(d);
  }
  const int64_t storage[1] = {view.numel() == 0 ? 0 : extent};
  AclTensor* tensor = rt.create_tensor(
      view.shape(), static_cast<uint64_t>(view.ndim()), ToAcl(view.dtype()),
      view.strides(), place.offset, kAclFormatNd, storage, 1, place.base);
  if (!tensor) {
    const char* message = rt.get_recent_err_msg();
    throw BackendError(detail::Concat(
        "polyops.", op, ": aclCreateTensor failed for shape ",
        view.ShapeString(), ": ", message ? message : "(no message)"));
  }
  return tensor;
}

struct Pool {
  void* data = nullptr;
  uint64_t size = 0;
};

// The common-API functions only some ops use (cann.h, CommonSymbol).
template <typename Fn>
Fn Common(const char* name) {
  return reinterpret_cast<Fn>(CommonSymbol(name));
}
using CreateIntArrayFn = AclIntArray* (*)(const int64_t*, uint64_t);
using DestroyIntArrayFn = AclnnStatus (*)(const AclIntArray*);
using CreateTensorListFn = AclTensorList* (*)(const AclTensor* const*,
                                              uint64_t);
using DestroyTensorListFn = AclnnStatus (*)(const AclTensorList*);
// aclrtMemcpy(dst, destMax, src, count, kind)
using MemcpyFn = AclError (*)(void*, size_t, const void*, size_t, int);
constexpr int kMemcpyHostToDevice = 1;  // ACL_MEMCPY_HOST_TO_DEVICE
constexpr int kMemcpyDeviceToHost = 2;  // ACL_MEMCPY_DEVICE_TO_HOST

void CheckCreated(const void* object, const char* op, const char* call) {
  if (object) return;
  const char* message = GetRuntime().get_recent_err_msg();
  throw BackendError(detail::Concat("polyops.", op, ": ", call, " failed: ",
                                    message ? message : "(no message)"));
}

}  // namespace

AclDataType ToAcl(DataType dtype) {
  switch (dtype) {
    case DataType::kBool:
      return AclDataType::kBool;
    case DataType::kInt8:
      return AclDataType::kInt8;
    case DataType::kInt16:
      return AclDataType::kInt16;
    case DataType::kInt32:
      return AclDataType::kInt32;
    case DataType::kInt64:
      return AclDataType::kInt64;
    case DataType::kUInt8:
      return AclDataType::kUInt8;
    case DataType::kFloat16:
      return AclDataType::kFloat16;
    case DataType::kBFloat16:
      return AclDataType::kBFloat16;
    case DataType::kFloat32:
      return AclDataType::kFloat;
    case DataType::kFloat64:
      return AclDataType::kDouble;
  }
  return AclDataType::kFloat;
}

AclScalar* ScalarOne(DataType dtype) {
  const Runtime& rt = GetRuntime();
  float one_float = 1.0f;
  int64_t one_int = 1;
  AclScalar* scalar = IsFloatingPoint(dtype)
                          ? rt.create_scalar(&one_float, AclDataType::kFloat)
                          : rt.create_scalar(&one_int, AclDataType::kInt64);
  if (!scalar) {
    const char* message = rt.get_recent_err_msg();
    throw BackendError(detail::Concat("polyops: aclCreateScalar failed: ",
                                      message ? message : "(no message)"));
  }
  return scalar;
}

void* StreamScratch(AclStream stream, uint64_t bytes) {
  if (bytes == 0) return nullptr;
  static std::mutex* mutex = new std::mutex;
  static auto* pools = new std::unordered_map<AclStream, Pool>;
  std::lock_guard<std::mutex> lock(*mutex);
  Pool& pool = (*pools)[stream];
  if (pool.size >= bytes) return pool.data;
  const Runtime& rt = GetRuntime();
  if (pool.data) {
    // Queued work may still read the old block.
    CheckStatus(rt.rt_synchronize_stream(stream), "ascend",
                "aclrtSynchronizeStream");
    CheckStatus(rt.rt_free(pool.data), "ascend", "aclrtFree");
    pool = Pool{};
  }
  const uint64_t size = std::max<uint64_t>(bytes, 1 << 20);
  void* data = nullptr;
  CheckStatus(rt.rt_malloc(&data, size, /*ACL_MEM_MALLOC_HUGE_FIRST=*/0),
              "ascend", "aclrtMalloc");
  pool = Pool{data, size};
  return data;
}

ExecutorCache::~ExecutorCache() {
  // Instances die on eviction or clear_cache, or never (the caches live to
  // exit): never after the runtime was torn down.
  if (RuntimeLoaded()) Release();
}

void ExecutorCache::Release() {
  const Runtime& rt = GetRuntime();
  if (executor_) rt.destroy_executor(executor_);
  for (AclTensor* tensor : tensors_) rt.destroy_tensor(tensor);
  executor_ = nullptr;
  tensors_.clear();
  offsets_.clear();
}

void ExecutorCache::Run(const char* op, const char* api, const Handle& handle,
                        std::initializer_list<Operand> operands,
                        int64_t scratch_bytes, PrepareFn prepare, void* context,
                        LaunchFn launch) {
  const Runtime& rt = GetRuntime();
  std::lock_guard<std::mutex> lock(mutex_);
  // The workspace sits after the scratch operands in one pooled block; its
  // size is known only after phase 1, so the block may move once more below.
  const auto scratch_size =
      static_cast<uint64_t>((scratch_bytes + kScratchAlignment - 1) /
                            kScratchAlignment * kScratchAlignment);
  char* scratch =
      static_cast<char*>(StreamScratch(handle.stream, scratch_size));
  std::vector<Operand> resolved(operands);
  for (Operand& operand : resolved) {
    if (operand.scratch_offset >= 0) {
      operand.view = operand.view.WithData(scratch + operand.scratch_offset);
    }
  }
  std::vector<Placement> places;
  places.reserve(resolved.size());
  bool fits = executor_ != nullptr && offsets_.size() == resolved.size();
  for (size_t i = 0; i < resolved.size(); ++i) {
    places.push_back(Place(resolved[i].view, op));
    fits = fits && offsets_[i] == places.back().offset;
  }
  if (!fits) {
    Release();
    for (size_t i = 0; i < resolved.size(); ++i) {
      tensors_.push_back(CreateTensor(rt, resolved[i].view, places[i], op));
      offsets_.push_back(places[i].offset);
    }
    uint64_t workspace = 0;
    AclOpExecutor* executor = nullptr;
    CheckStatus(prepare(context, tensors_.data(), &workspace, &executor), op,
                api);
    // Repeatable, so later calls re-point the descriptors instead of
    // running phase 1 again; destroyed with the instance.
    CheckStatus(rt.set_executor_repeatable(executor), op,
                "aclSetAclOpExecutorRepeatable");
    executor_ = executor;
    workspace_size_ = workspace;
  } else {
    size_t input = 0, output = 0;
    for (size_t i = 0; i < resolved.size(); ++i) {
      const AclnnStatus status =
          resolved[i].input
              ? rt.set_input_tensor_addr(executor_, input++, tensors_[i],
                                         places[i].base)
              : rt.set_output_tensor_addr(executor_, output++, tensors_[i],
                                          places[i].base);
      CheckStatus(status, op,
                  resolved[i].input ? "aclSetInputTensorAddr"
                                    : "aclSetOutputTensorAddr");
    }
  }
  char* block = static_cast<char*>(
      StreamScratch(handle.stream, scratch_size + workspace_size_));
  if (scratch_size > 0 && block != scratch) {
    // The pool grew for the workspace: point the scratch operands at the
    // new block (their offsets from alignment are unchanged: the block is
    // aligned).
    size_t input = 0, output = 0;
    for (size_t i = 0; i < resolved.size(); ++i) {
      if (resolved[i].scratch_offset < 0) {
        (resolved[i].input ? input : output)++;
        continue;
      }
      void* address = block + resolved[i].scratch_offset;
      CheckStatus(
          rt.set_output_tensor_addr(executor_, output++, tensors_[i], address),
          op, "aclSetOutputTensorAddr");
    }
  }
  void* workspace = workspace_size_ ? block + scratch_size : nullptr;
  CheckStatus(launch(workspace, workspace_size_, executor_, handle.stream), op,
              api);
}

OneShotCall::~OneShotCall() {
  if (!RuntimeLoaded()) return;
  const Runtime& rt = GetRuntime();
  if (!lists_.empty()) {
    static const auto destroy =
        Common<DestroyTensorListFn>("aclDestroyTensorList");
    for (AclTensorList* list : lists_) destroy(list);
  }
  for (AclTensor* tensor : tensors_) rt.destroy_tensor(tensor);
  if (!arrays_.empty()) {
    static const auto destroy = Common<DestroyIntArrayFn>("aclDestroyIntArray");
    for (AclIntArray* array : arrays_) destroy(array);
  }
}

AclTensor* OneShotCall::Describe(const Tensor& view) {
  AclTensor* tensor = CreateTensor(GetRuntime(), view, Place(view, op_), op_);
  tensors_.push_back(tensor);
  return tensor;
}

AclTensorList* OneShotCall::DescribeList(std::initializer_list<Tensor> views) {
  static const auto create = Common<CreateTensorListFn>("aclCreateTensorList");
  const Runtime& rt = GetRuntime();
  std::vector<AclTensor*> elements;
  for (const Tensor& view : views) {
    elements.push_back(CreateTensor(rt, view, Place(view, op_), op_));
  }
  AclTensorList* list = create(elements.data(), elements.size());
  if (!list) {
    for (AclTensor* tensor : elements) rt.destroy_tensor(tensor);
  }
  CheckCreated(list, op_, "aclCreateTensorList");
  lists_.push_back(list);
  return list;
}

AclIntArray* OneShotCall::IntArray(const std::vector<int64_t>& values) {
  static const auto create = Common<CreateIntArrayFn>("aclCreateIntArray");
  AclIntArray* array = create(values.data(), values.size());
  CheckCreated(array, op_, "aclCreateIntArray");
  arrays_.push_back(array);
  return array;
}

void OneShotCall::Launch(const Handle& handle, const char* api,
                         AclnnStatus phase1, uint64_t workspace_size,
                         AclOpExecutor* executor, LaunchFn launch) {
  CheckStatus(phase1, op_, api);
  // A failure from here on leaves the executor to CANN: a non-repeatable
  // executor cannot be destroyed by the caller (aclDestroyAclOpExecutor is
  // for repeatable ones only), so an error path may leak it.
  void* workspace = StreamScratch(handle.stream, workspace_size);
  CheckStatus(launch(workspace, workspace_size, executor, handle.stream), op_,
              api);
}

void CopyToHost(const Handle& handle, void* host, const void* device,
                size_t bytes, const char* op) {
  if (bytes == 0) return;
  static const auto copy = Common<MemcpyFn>("aclrtMemcpy");
  const Runtime& rt = GetRuntime();
  CheckStatus(rt.rt_synchronize_stream(handle.stream), op,
              "aclrtSynchronizeStream");
  CheckStatus(copy(host, bytes, device, bytes, kMemcpyDeviceToHost), op,
              "aclrtMemcpy (device to host)");
}

const void* ProcessConstant(const char* name, int device_index, size_t bytes,
                            void (*fill)(void* host, size_t bytes)) {
  static std::mutex* mutex = new std::mutex;
  // Used until exit, like the libraries: never freed.
  static auto* constants = new std::map<std::pair<std::string, int>, void*>;
  std::lock_guard<std::mutex> lock(*mutex);
  auto found = constants->find({name, device_index});
  if (found != constants->end()) return found->second;
  static const auto copy = Common<MemcpyFn>("aclrtMemcpy");
  const Runtime& rt = GetRuntime();
  std::vector<unsigned char> host(bytes);
  fill(host.data(), bytes);
  void* data = nullptr;
  CheckStatus(rt.rt_malloc(&data, bytes, /*ACL_MEM_MALLOC_HUGE_FIRST=*/0), name,
              "aclrtMalloc");
  const AclError status =
      copy(data, bytes, host.data(), bytes, kMemcpyHostToDevice);
  if (status != 0) rt.rt_free(data);
  CheckStatus(status, name, "aclrtMemcpy (host to device)");
  constants->emplace(std::make_pair(std::string(name), device_index), data);
  return data;
}

}  // namespace polyops::ascend
