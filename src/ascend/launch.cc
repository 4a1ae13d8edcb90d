#include "ascend/launch.h"

#include <algorithm>
#include <unordered_map>

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

// Points a repeatable executor's descriptors at `places` (or, given
// `scratch_block`, only the scratch operands at that block). A `ref`
// operand takes an index in both spaces.
void Repoint(const Runtime& rt, const char* op, AclOpExecutor* executor,
             const std::vector<AclTensor*>& tensors,
             const std::vector<Operand>& operands,
             const std::vector<Placement>& places, char* scratch_block) {
  size_t input = 0, output = 0;
  for (size_t i = 0; i < operands.size(); ++i) {
    const Operand& operand = operands[i];
    const bool is_scratch = operand.scratch_offset >= 0;
    // With scratch_block, only the scratch operands move (to that block).
    const bool set = scratch_block == nullptr || is_scratch;
    void* address = scratch_block != nullptr && is_scratch
                        ? scratch_block + operand.scratch_offset
                        : places[i].base;
    if (operand.input || operand.ref) {
      const size_t index = input++;
      if (set) {
        CheckStatus(
            rt.set_input_tensor_addr(executor, index, tensors[i], address), op,
            "aclSetInputTensorAddr");
      }
    }
    if (!operand.input || operand.ref) {
      const size_t index = output++;
      if (set) {
        CheckStatus(
            rt.set_output_tensor_addr(executor, index, tensors[i], address), op,
            "aclSetOutputTensorAddr");
      }
    }
  }
}

AclScalar* Checked(const Runtime& rt, AclScalar* scalar) {
  if (!scalar) {
    const char* message = rt.get_recent_err_msg();
    throw BackendError(detail::Concat("polyops: aclCreateScalar failed: ",
                                      message ? message : "(no message)"));
  }
  return scalar;
}

struct Pool {
  void* data = nullptr;
  uint64_t size = 0;
};

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
  return Checked(rt, IsFloatingPoint(dtype)
                         ? rt.create_scalar(&one_float, AclDataType::kFloat)
                         : rt.create_scalar(&one_int, AclDataType::kInt64));
}

IntArrayHandle::IntArrayHandle(std::initializer_list<int64_t> values) {
  const Runtime& rt = GetRuntime();
  array_ = rt.create_int_array(values.begin(), values.size());
  if (!array_) {
    const char* message = rt.get_recent_err_msg();
    throw BackendError(detail::Concat("polyops: aclCreateIntArray failed: ",
                                      message ? message : "(no message)"));
  }
}

AclScalar* ScalarFloat(double value) {
  const Runtime& rt = GetRuntime();
  auto single = static_cast<float>(value);
  return Checked(rt, rt.create_scalar(&single, AclDataType::kFloat));
}

void* StreamScratch(AclStream stream, uint64_t bytes) {
  if (bytes == 0) return nullptr;
  static std::mutex* mutex = new std::mutex;
  static auto* pools = new std::unordered_map<AclStream, Pool>;
  std::lock_guard<std::mutex> lock(*mutex);
  Pool& pool = (*pools)[stream];
  if (pool.size >= bytes) return pool.data;
  const Runtime& rt = GetRuntime();
  // Queued work may still use the old block, and an earlier launch of the
  // running op may have left an intermediate in it (Operand): let it
  // finish, then carry the contents over.
  if (pool.data) {
    CheckStatus(rt.rt_synchronize_stream(stream), "ascend",
                "aclrtSynchronizeStream");
  }
  const uint64_t size = std::max<uint64_t>(bytes, 1 << 20);
  void* data = nullptr;
  CheckStatus(rt.rt_malloc(&data, size, /*ACL_MEM_MALLOC_HUGE_FIRST=*/0),
              "ascend", "aclrtMalloc");
  if (pool.data) {
    CheckStatus(rt.rt_memcpy(data, size, pool.data, pool.size,
                             /*ACL_MEMCPY_DEVICE_TO_DEVICE=*/3),
                "ascend", "aclrtMemcpy");
    CheckStatus(rt.rt_free(pool.data), "ascend", "aclrtFree");
  }
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
    Repoint(rt, op, executor_, tensors_, resolved, places, nullptr);
  }
  char* block = static_cast<char*>(
      StreamScratch(handle.stream, scratch_size + workspace_size_));
  if (scratch_size > 0 && block != scratch) {
    // The pool grew for the workspace: point the scratch operands at the
    // new block (their offsets from alignment are unchanged: the block is
    // aligned).
    Repoint(rt, op, executor_, tensors_, resolved, places, block);
  }
  void* workspace = workspace_size_ ? block + scratch_size : nullptr;
  CheckStatus(launch(workspace, workspace_size_, executor_, handle.stream), op,
              api);
}

}  // namespace polyops::ascend
