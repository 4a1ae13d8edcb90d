// Running aclnn operators (launch.h): ExecutorCache binds descriptors once
// and re-points them on later calls, RunSteps chains launches under one
// stream pool, OneShotCall runs phase 1 on every call. Descriptors live in
// descriptors.cc, the pools in device_memory.cc.
#include "ascend/runtime/launch.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <vector>

#include "ascend/runtime/cann.h"
#include "ascend/runtime/descriptors.h"
#include "ascend/runtime/device_memory.h"
#include "core/error.h"
#include "core/handle.h"
#include "core/tensor.h"

namespace polyops::ascend {

ExecutorCache::~ExecutorCache() {
  // Instances die on eviction or clear_cache, or never (the caches live to
  // exit): never after the runtime was torn down.
  if (RuntimeLoaded()) Release();
}

void ExecutorCache::Release() {
  const Runtime& rt = GetRuntime();
  if (executor_) rt.destroy_executor(executor_);
  // A list destroys its tensors (trap 13); the others go one by one.
  for (AclTensorList* list : lists_) rt.destroy_tensor_list(list);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (!listed_[i]) rt.destroy_tensor(tensors_[i]);
  }
  executor_ = nullptr;
  workspace_size_ = 0;
  tensors_.clear();
  listed_.clear();
  lists_.clear();
  slots_.clear();
  offsets_.clear();
}

void ExecutorCache::Point(const char* op, size_t i, void* base) {
  const Runtime& rt = GetRuntime();
  const Slot& slot = slots_[i];
  if (slot.ir >= 0) {
    CheckStatus(rt.set_dynamic_input_tensor_addr(
                    executor_, static_cast<size_t>(slot.ir),
                    static_cast<size_t>(slot.element), lists_[slot.list], base),
                op, "aclSetDynamicInputTensorAddr");
  } else if (slot.input >= 0) {
    CheckStatus(
        rt.set_input_tensor_addr(executor_, static_cast<size_t>(slot.input),
                                 tensors_[i], base),
        op, "aclSetInputTensorAddr");
  }
  if (slot.output >= 0) {
    CheckStatus(
        rt.set_output_tensor_addr(executor_, static_cast<size_t>(slot.output),
                                  tensors_[i], base),
        op, "aclSetOutputTensorAddr");
  }
}

uint64_t ExecutorCache::Bind(const char* op, const char* api,
                             const Operand* operands, size_t count,
                             char* scratch, PrepareFn prepare, void* context) {
  const Runtime& rt = GetRuntime();
  std::vector<Tensor> views;
  std::vector<Placement> places;
  views.reserve(count);
  places.reserve(count);
  bool fits = executor_ != nullptr && offsets_.size() == count;
  for (size_t i = 0; i < count; ++i) {
    const Operand& operand = operands[i];
    views.push_back(
        operand.scratch_offset >= 0
            ? operand.view.WithData(scratch + operand.scratch_offset)
            : operand.view);
    places.push_back(Place(views.back(), op));
    fits = fits && offsets_[i] == places.back().offset;
  }
  if (fits) {
    for (size_t i = 0; i < count; ++i) Point(op, i, places[i].base);
    return workspace_size_;
  }
  Release();
  // The setters' index spaces: inputs and outputs in parameter order (a
  // Ref parameter in both), list elements by (parameter, element).
  int64_t inputs = 0, outputs = 0, ir = 0;
  for (size_t i = 0; i < count; ++i) {
    const Operand& operand = operands[i];
    Slot slot;
    if (operand.list >= 0) {
      const bool first = i == 0 || operands[i - 1].list != operand.list;
      slot.list = operand.list;
      slot.ir = first ? ir++ : slots_.back().ir;
      slot.element = first ? 0 : slots_.back().element + 1;
      slot.input = inputs++;
    } else {
      if (operand.input) {
        slot.input = inputs++;
        ++ir;
      }
      if (!operand.input || operand.ref) slot.output = outputs++;
    }
    slots_.push_back(slot);
    tensors_.push_back(CreateTensor(rt, views[i], places[i], op));
    listed_.push_back(false);
    offsets_.push_back(places[i].offset);
  }
  // Lists, in order of their first element.
  for (size_t i = 0; i < count;) {
    if (operands[i].list < 0) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < count && operands[end].list == operands[i].list) ++end;
    POLYOPS_CHECK(operands[i].list == static_cast<int>(lists_.size()),
                  "polyops.", op, ": tensor lists must be numbered 0, 1, ...");
    AclTensorList* list = rt.create_tensor_list(tensors_.data() + i,
                                                static_cast<uint64_t>(end - i));
    if (!list) {
      const char* message = rt.get_recent_err_msg();
      throw BackendError(detail::Concat("polyops.", op,
                                        ": aclCreateTensorList failed: ",
                                        message ? message : "(no message)"));
    }
    lists_.push_back(list);
    for (size_t k = i; k < end; ++k) listed_[k] = true;
    i = end;
  }
  uint64_t workspace = 0;
  AclOpExecutor* executor = nullptr;
  CheckStatus(prepare(context, tensors_.data(), &workspace, &executor), op,
              api);
  // Repeatable, so later calls re-point the descriptors instead of running
  // phase 1 again; destroyed with the instance.
  CheckStatus(rt.set_executor_repeatable(executor), op,
              "aclSetAclOpExecutorRepeatable");
  executor_ = executor;
  workspace_size_ = workspace;
  return workspace;
}

void ExecutorCache::MoveScratch(const char* op, const Operand* operands,
                                size_t count, char* scratch) {
  // The block is aligned, so the scratch views keep their placement.
  for (size_t i = 0; i < count; ++i) {
    if (operands[i].scratch_offset >= 0) {
      Point(op, i, scratch + operands[i].scratch_offset);
    }
  }
}

void ExecutorCache::Run(const char* op, const char* api, const Handle& handle,
                        std::initializer_list<Operand> operands,
                        int64_t scratch_bytes, PrepareFn prepare, void* context,
                        LaunchFn launch) {
  const Launch one{this,    api,   operands.begin(), operands.size(), prepare,
                   context, launch};
  RunLaunches(op, handle, scratch_bytes, &one, 1);
}

void ExecutorCache::Run(const char* op, const char* api, const Handle& handle,
                        const std::vector<Operand>& operands,
                        int64_t scratch_bytes, PrepareFn prepare, void* context,
                        LaunchFn launch) {
  const Launch one{this,    api,     operands.data(), operands.size(),
                   prepare, context, launch};
  RunLaunches(op, handle, scratch_bytes, &one, 1);
}

void RunSteps(const char* op, const Handle& handle, int64_t scratch_bytes,
              std::initializer_list<Step> steps) {
  RunSteps(op, handle, scratch_bytes, steps.begin(), steps.size());
}

void RunSteps(const char* op, const Handle& handle, int64_t scratch_bytes,
              const Step* steps, size_t count) {
  POLYOPS_CHECK(count <= kMaxSteps, "polyops.", op, ": more than ", kMaxSteps,
                " launches in one call");
  ExecutorCache::Launch launches[kMaxSteps];
  for (size_t i = 0; i < count; ++i) {
    const Step& step = steps[i];
    launches[i] = {step.cache,           step.api,     step.operands.begin(),
                   step.operands.size(), step.prepare, step.context,
                   step.launch};
  }
  ExecutorCache::RunLaunches(op, handle, scratch_bytes, launches, count);
}

void ExecutorCache::RunLaunches(const char* op, const Handle& handle,
                                int64_t scratch_bytes, const Launch* launches,
                                size_t count) {
  GetRuntime();
  LockedPool pool(handle, op);
  // Lock order: the stream's pool, then the caches in step order.
  std::unique_lock<std::mutex> locks[kMaxSteps];
  for (size_t i = 0; i < count; ++i) {
    locks[i] = std::unique_lock<std::mutex>(launches[i].cache->mutex_);
  }
  const auto scratch_size = static_cast<uint64_t>(ScratchAlign(scratch_bytes));
  char* scratch = Reserve(*pool, scratch_size);
  uint64_t workspace = 0;
  for (size_t i = 0; i < count; ++i) {
    const Launch& l = launches[i];
    workspace =
        std::max(workspace, l.cache->Bind(op, l.api, l.operands, l.count,
                                          scratch, l.prepare, l.context));
  }
  // Nothing of this call is queued yet, so growing the block (which
  // synchronizes the stream and frees the old one) loses no scratch data.
  char* block = Reserve(*pool, scratch_size + workspace);
  if (scratch_size > 0 && block != scratch) {
    for (size_t i = 0; i < count; ++i) {
      launches[i].cache->MoveScratch(op, launches[i].operands,
                                     launches[i].count, block);
    }
  }
  for (size_t i = 0; i < count; ++i) {
    const Launch& l = launches[i];
    const uint64_t size = l.cache->workspace_size_;
    CheckStatus(l.launch(size ? block + scratch_size : nullptr, size,
                         l.cache->executor_, handle.stream),
                op, l.api);
    pool->launched = true;
  }
}

OneShotCall::~OneShotCall() {
  if (!RuntimeLoaded()) return;
  const Runtime& rt = GetRuntime();
  for (AclTensorList* list : lists_) rt.destroy_tensor_list(list);
  for (AclTensor* tensor : tensors_) rt.destroy_tensor(tensor);
  for (AclIntArray* array : arrays_) rt.destroy_int_array(array);
}

AclTensor* OneShotCall::Describe(const Tensor& view) {
  AclTensor* tensor = CreateTensor(GetRuntime(), view, Place(view, op_), op_);
  tensors_.push_back(tensor);
  return tensor;
}

AclTensorList* OneShotCall::DescribeList(std::initializer_list<Tensor> views) {
  const Runtime& rt = GetRuntime();
  std::vector<AclTensor*> elements;
  for (const Tensor& view : views) {
    elements.push_back(CreateTensor(rt, view, Place(view, op_), op_));
  }
  AclTensorList* list = rt.create_tensor_list(elements.data(), elements.size());
  if (!list) {
    for (AclTensor* tensor : elements) rt.destroy_tensor(tensor);
  }
  CheckCreated(list, op_, "aclCreateTensorList");
  lists_.push_back(list);
  return list;
}

AclIntArray* OneShotCall::IntArray(const std::vector<int64_t>& values) {
  AclIntArray* array =
      GetRuntime().create_int_array(values.data(), values.size());
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
  // The pool's lock is held until the launch is queued: another call on
  // this stream growing (and freeing) the block in between would hand
  // this launch freed memory.
  LockedPool pool(handle, op_);
  void* workspace = workspace_size ? Reserve(*pool, workspace_size) : nullptr;
  CheckStatus(launch(workspace, workspace_size, executor, handle.stream), op_,
              api);
  pool->launched = true;
}

}  // namespace polyops::ascend
