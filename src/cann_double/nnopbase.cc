// libnnopbase.so of the CANN test double: aclTensor & co., executors and the
// phase-2 launcher shared by every aclnn op.
//
// Every descriptor lives in a registry, so a double destroy or the use of a
// destroyed descriptor is an error with a message, never a crash. Destroyed
// objects stay in a quarantine (not freed) for a while so that their address
// cannot be reused by a new object while a stale pointer may still be used.
#include "nnopbase.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "numeric.h"

namespace cann_double {
namespace {

constexpr size_t kQuarantine = 4096;
constexpr uintptr_t kDataAlign = 32;

struct Registry {
  std::mutex mutex;
  std::unordered_map<const void*, std::unique_ptr<Object>> live;
  std::deque<std::unique_ptr<Object>> quarantine;
  std::unordered_set<const void*> destroyed;
  size_t live_executors = 0;
};

Registry& GetRegistry() {
  static Registry* registry = new Registry;  // leaked: see runtime.cc State
  return *registry;
}

std::atomic<int64_t> next_executor_id{1};

const char* KindName(Kind kind) {
  switch (kind) {
    case Kind::kTensor:
      return "aclTensor";
    case Kind::kScalar:
      return "aclScalar";
    case Kind::kIntArray:
      return "aclIntArray";
    case Kind::kBoolArray:
      return "aclBoolArray";
    case Kind::kFloatArray:
      return "aclFloatArray";
    case Kind::kTensorList:
      return "aclTensorList";
    case Kind::kExecutor:
      return "aclOpExecutor";
  }
  return "object";
}

std::string PointerText(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%p", p);
  return buf;
}

template <typename T>
T* Register(std::unique_ptr<T> object) {
  T* raw = object.get();
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (object->kind == Kind::kExecutor) ++r.live_executors;
  r.live[raw] = std::move(object);
  return raw;
}

// Moves a live object to the quarantine. Returns false (and *why) if p is not
// a live object of that kind.
bool Retire(const void* p, Kind kind, std::string* why) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.live.find(p);
  if (it == r.live.end() || it->second->kind != kind) {
    *why = std::string(KindName(kind)) + " " + PointerText(p) +
           (r.destroyed.count(p) != 0 ? " was already destroyed"
                                      : " is not a live descriptor");
    return false;
  }
  if (kind == Kind::kExecutor) --r.live_executors;
  r.destroyed.insert(p);
  r.quarantine.push_back(std::move(it->second));
  r.live.erase(it);
  if (r.quarantine.size() > kQuarantine) {
    r.destroyed.erase(r.quarantine.front().get());
    r.quarantine.pop_front();
  }
  return true;
}

int LogStatus(const char* function, int status, int64_t executor = -1) {
  LogRecord record;
  record.function = function;
  record.status = status;
  record.executor = executor;
  Log(record);
  return status;
}

int Fail(const char* function, int code, const std::string& message,
         int64_t executor = -1) {
  SetError(code, std::string(function) + ": " + message);
  return LogStatus(function, code, executor);
}

// Destroy entry points: nullptr is OK (acl_meta.h).
aclnnStatus Destroy(const char* function, const void* p, Kind kind) {
  if (p == nullptr) return kSuccess;
  std::string why;
  if (!Retire(p, kind, &why)) return Fail(function, kParamInvalid, why);
  return kSuccess;
}

// aclCreate{Int,Bool,Float}Array: the host values are copied.
template <typename Array, typename Value>
Array* CreateArray(const char* function, const Value* value, uint64_t size) {
  if (value == nullptr && size > 0) {
    Fail(function, kNullptr, "value is NULL");
    return nullptr;
  }
  auto array = std::make_unique<Array>();
  array->values.assign(value, value + size);
  return Register(std::move(array));
}

bool CheckAddress(const void* addr, size_t bytes, std::string* why) {
  if (bytes == 0 && addr == nullptr) return true;  // empty storage
  if (reinterpret_cast<uintptr_t>(addr) % kDataAlign != 0) {
    *why = "address " + PointerText(addr) + " is not 32-byte aligned";
    return false;
  }
  if (!IsDeviceRange(addr, bytes == 0 ? 1 : bytes)) {
    *why = "address " + PointerText(addr) + " (storage of " +
           std::to_string(bytes) +
           " bytes) is not inside device memory from aclrtMalloc";
    return false;
  }
  return true;
}

bool IsPlainFormat(int32_t format) {
  switch (format) {
    case 0:   // NCHW
    case 1:   // NHWC
    case 2:   // ND
    case 16:  // HWCN
    case 27:  // NDHWC
    case 30:  // NCDHW
    case 35:  // NC
    case 47:  // NCL
      return true;
    default:
      return false;
  }
}

aclOpExecutor* LiveExecutor(const char* function, aclOpExecutor* executor,
                            int* status) {
  if (executor == nullptr) {
    *status = Fail(function, kNullptr, "executor is NULL");
    return nullptr;
  }
  std::string why;
  auto* ex = static_cast<aclOpExecutor*>(
      LookupObject(executor, Kind::kExecutor, &why));
  if (ex == nullptr) {
    *status = Fail(function, kInnerNullptr,
                   why +
                       " (a non-repeatable executor is freed by its phase "
                       "2)");
  }
  return ex;
}

// Retargets one snapshot slot (and the tensor descriptor, when given).
aclnnStatus SetSlotAddr(const char* function, aclOpExecutor* ex, int slot,
                        aclTensor* tensor, void* addr) {
  TensorView& view = ex->slots[slot];
  if (!view.present) {
    return Fail(function, kParamInvalid,
                "that argument was NULL at GetWorkspaceSize", ex->id);
  }
  std::string why;
  if (!CheckAddress(addr, view.StorageBytes(), &why)) {
    return Fail(function, kParamInvalid, why, ex->id);
  }
  if (tensor != nullptr) {
    auto* t =
        static_cast<aclTensor*>(LookupObject(tensor, Kind::kTensor, &why));
    if (t == nullptr) return Fail(function, kParamInvalid, why, ex->id);
    t->view.data = addr;
  }
  view.data = addr;
  return LogStatus(function, kSuccess, ex->id);
}

// aclSet{Input,Output,}TensorAddr: index into the inputs, the outputs, or
// the inputs followed by the outputs.
aclnnStatus SetIndexedAddr(const char* function, aclOpExecutor* executor,
                           size_t index, bool inputs, bool outputs,
                           aclTensor* tensor, void* addr) {
  int status = kSuccess;
  aclOpExecutor* ex = LiveExecutor(function, executor, &status);
  if (ex == nullptr) return status;
  std::vector<int> space;
  if (inputs) space = ex->inputs;
  if (outputs)
    space.insert(space.end(), ex->outputs.begin(), ex->outputs.end());
  if (index >= space.size()) {
    return Fail(function, kParamInvalid,
                "index " + std::to_string(index) + " out of range (" +
                    std::to_string(space.size()) + " tensors)",
                ex->id);
  }
  return SetSlotAddr(function, ex, space[index], tensor, addr);
}

}  // namespace

size_t ItemSize(int32_t dtype) {
  switch (dtype) {
    case kFloat:
    case kInt32:
    case kUint32:
      return 4;
    case kFloat16:
    case kBf16:
    case kInt16:
    case kUint16:
      return 2;
    case kInt8:
    case kUint8:
    case kBool:
      return 1;
    case kInt64:
    case kUint64:
    case kDouble:
      return 8;
    default:
      return 0;
  }
}

std::string DtypeName(int32_t dtype) {
  switch (dtype) {
    case kFloat:
      return "FLOAT";
    case kFloat16:
      return "FLOAT16";
    case kBf16:
      return "BF16";
    case kDouble:
      return "DOUBLE";
    case kInt8:
      return "INT8";
    case kUint8:
      return "UINT8";
    case kInt16:
      return "INT16";
    case kUint16:
      return "UINT16";
    case kInt32:
      return "INT32";
    case kUint32:
      return "UINT32";
    case kInt64:
      return "INT64";
    case kUint64:
      return "UINT64";
    case kBool:
      return "BOOL";
    default:
      return "dtype " + std::to_string(dtype);
  }
}

Object* LookupObject(const void* p, Kind kind, std::string* why) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.live.find(p);
  if (it != r.live.end() && it->second->kind == kind) return it->second.get();
  if (it != r.live.end()) {
    *why = PointerText(p) + " is an " + KindName(it->second->kind) +
           ", not an " + KindName(kind);
  } else if (r.destroyed.count(p) != 0) {
    *why = std::string(KindName(kind)) + " " + PointerText(p) +
           " was already destroyed (use after free)";
  } else {
    *why = PointerText(p) + " is not a live " + KindName(kind);
  }
  return nullptr;
}

// --- OpBuilder ---------------------------------------------------------------

OpBuilder::OpBuilder(const char* op, uint64_t* workspace_size,
                     aclOpExecutor** executor)
    : op_(op),
      workspace_size_(workspace_size),
      executor_out_(executor),
      ex_(std::make_unique<aclOpExecutor>()) {
  ex_->op = op;
  ex_->id = next_executor_id.fetch_add(1);
  Check(workspace_size != nullptr && executor != nullptr, kNullptr,
        "workspaceSize or executor is NULL");
}

OpBuilder::~OpBuilder() = default;

int OpBuilder::AddSlot(const aclTensor* t, const char* name, bool required) {
  TensorView view;
  if (t != nullptr) {
    std::string why;
    auto* tensor =
        static_cast<const aclTensor*>(LookupObject(t, Kind::kTensor, &why));
    if (tensor == nullptr) {
      Check(false, kParamInvalid, std::string(name) + ": " + why);
      return -1;
    }
    view = tensor->view;
  } else if (required) {
    Check(false, kNullptr, std::string(name) + " is NULL");
    return -1;
  }
  ex_->slots.push_back(std::move(view));
  return static_cast<int>(ex_->slots.size()) - 1;
}

int OpBuilder::In(const aclTensor* t, const char* name) {
  const int slot = AddSlot(t, name, true);
  if (slot < 0) return slot;
  ex_->ir_inputs.push_back({static_cast<int>(ex_->inputs.size()), 1, false});
  ex_->inputs.push_back(slot);
  return slot;
}

int OpBuilder::OptIn(const aclTensor* t, const char* name) {
  const int slot = AddSlot(t, name, false);
  if (slot < 0) return slot;
  ex_->ir_inputs.push_back({static_cast<int>(ex_->inputs.size()), 1, false});
  ex_->inputs.push_back(slot);
  return slot;
}

int OpBuilder::Out(const aclTensor* t, const char* name) {
  const int slot = AddSlot(t, name, true);
  if (slot >= 0) ex_->outputs.push_back(slot);
  return slot;
}

int OpBuilder::OptOut(const aclTensor* t, const char* name) {
  const int slot = AddSlot(t, name, false);
  if (slot >= 0) ex_->outputs.push_back(slot);
  return slot;
}

int OpBuilder::Ref(const aclTensor* t, const char* name) {
  const int slot = In(t, name);
  if (slot >= 0) ex_->outputs.push_back(slot);
  return slot;
}

int OpBuilder::InList(const aclTensorList* list, const char* name, int* count) {
  *count = 0;
  if (list == nullptr) {
    Check(false, kNullptr, std::string(name) + " is NULL");
    return -1;
  }
  std::string why;
  auto* l = static_cast<const aclTensorList*>(
      LookupObject(list, Kind::kTensorList, &why));
  if (l == nullptr) {
    Check(false, kParamInvalid, std::string(name) + ": " + why);
    return -1;
  }
  const int first_input = static_cast<int>(ex_->inputs.size());
  const int first_slot = static_cast<int>(ex_->slots.size());
  for (size_t i = 0; i < l->tensors.size(); ++i) {
    const std::string element =
        std::string(name) + "[" + std::to_string(i) + "]";
    const int slot = AddSlot(l->tensors[i], element.c_str(), true);
    if (slot < 0) return -1;
    ex_->inputs.push_back(slot);
  }
  *count = static_cast<int>(l->tensors.size());
  ex_->ir_inputs.push_back({first_input, *count, true});
  return first_slot;
}

const aclScalar* OpBuilder::Scalar(const aclScalar* s, const char* name) {
  if (s == nullptr) {
    Check(false, kNullptr, std::string(name) + " is NULL");
    return nullptr;
  }
  std::string why;
  auto* scalar =
      static_cast<const aclScalar*>(LookupObject(s, Kind::kScalar, &why));
  Check(scalar != nullptr, kParamInvalid, std::string(name) + ": " + why);
  return scalar;
}

const aclIntArray* OpBuilder::IntArray(const aclIntArray* a, const char* name,
                                       bool required) {
  if (a == nullptr) {
    Check(!required, kNullptr, std::string(name) + " is NULL");
    return nullptr;
  }
  std::string why;
  auto* array =
      static_cast<const aclIntArray*>(LookupObject(a, Kind::kIntArray, &why));
  Check(array != nullptr, kParamInvalid, std::string(name) + ": " + why);
  return array;
}

const TensorView& OpBuilder::V(int slot) const { return ex_->slots[slot]; }

bool OpBuilder::Check(bool cond, int code, const std::string& message) {
  if (!cond && status_ == kSuccess) {
    status_ = code;
    SetError(code, op_ + "GetWorkspaceSize: " + message);
  }
  return cond;
}

aclnnStatus OpBuilder::Launch(uint64_t workspace, Compute compute) {
  LogRecord record;
  record.function = op_ + "GetWorkspaceSize";
  record.phase = 1;
  if (status_ != kSuccess) {
    record.status = status_;
    Log(record);
    return status_;
  }
  ex_->workspace = workspace;
  ex_->compute = std::move(compute);
  record.workspace = static_cast<int64_t>(workspace);
  record.executor = ex_->id;
  *workspace_size_ = workspace;
  *executor_out_ = Register(std::move(ex_));
  Log(record);
  return kSuccess;
}

aclnnStatus RunPhase2(const char* op, void* workspace, uint64_t workspace_size,
                      aclOpExecutor* executor, aclrtStream stream) {
  LogRecord record;
  record.function = op;
  record.phase = 2;
  record.workspace = static_cast<int64_t>(workspace_size);
  record.stream = StreamId(stream);
  auto fail = [&](int code, const std::string& message) {
    SetError(code, std::string(op) + ": " + message);
    record.status = code;
    Log(record);
    return code;
  };
  if (executor == nullptr) return fail(kNullptr, "executor is NULL");
  std::string why;
  auto* ex = static_cast<aclOpExecutor*>(
      LookupObject(executor, Kind::kExecutor, &why));
  if (ex == nullptr) {
    return fail(kInnerNullptr,
                why +
                    " (a non-repeatable executor is freed by its first "
                    "phase 2)");
  }
  record.executor = ex->id;
  if (ex->op != op) {
    return fail(kParamInvalid,
                "executor was made by " + ex->op + "GetWorkspaceSize");
  }
  if (workspace_size < ex->workspace) {
    return fail(kParamInvalid,
                "workspaceSize " + std::to_string(workspace_size) +
                    " is smaller than the " + std::to_string(ex->workspace) +
                    " bytes GetWorkspaceSize asked for");
  }
  if (ex->workspace > 0 && !IsDeviceRange(workspace, ex->workspace)) {
    return fail(kParamInvalid, "workspace " + PointerText(workspace) +
                                   " is not " + std::to_string(ex->workspace) +
                                   " bytes of device memory");
  }
  if (!IsLiveStream(stream)) return fail(kParamInvalid, "not a live stream");

  // The queued work gets its own copy: later aclSet*TensorAddr calls on a
  // repeatable executor affect later launches only.
  std::string name = op;
  const uint64_t needed = ex->workspace;
  Work work = [name, slots = ex->slots, compute = ex->compute, workspace,
               needed]() {
    for (size_t i = 0; i < slots.size(); ++i) {
      const TensorView& v = slots[i];
      const size_t bytes = v.StorageBytes();
      if (v.present && bytes > 0 && !IsDeviceRange(v.data, bytes)) {
        return SetError(kRtInternalError,
                        name + ": tensor argument " + std::to_string(i) +
                            " at " + PointerText(v.data) +
                            " is not device memory when the op runs (freed "
                            "before the stream was synchronized?)");
      }
    }
    if (needed > 0) {
      if (!IsDeviceRange(workspace, needed)) {
        return SetError(kRtInternalError,
                        name + ": workspace freed before the op ran");
      }
      // The op owns its workspace while it runs: scribble over it so that
      // a workspace shared with concurrent work shows up.
      std::memset(workspace, 0xa5, needed);
    }
    return compute(slots);
  };
  if (!Enqueue(stream, op, ex->id, std::move(work))) {
    return fail(kParamInvalid, "not a live stream");
  }
  if (!ex->repeatable) Retire(ex, Kind::kExecutor, &why);
  record.status = kSuccess;
  Log(record);
  return kSuccess;
}

}  // namespace cann_double

using namespace cann_double;  // NOLINT: the C entry points below

DOUBLE_API aclTensor* aclCreateTensor(
    const int64_t* viewDims, uint64_t viewDimsNum, int32_t dataType,
    const int64_t* stride, int64_t offset, int32_t format,
    const int64_t* storageDims, uint64_t storageDimsNum, void* tensorData) {
  const char* fn = "aclCreateTensor";
  if ((viewDims == nullptr && viewDimsNum > 0) ||
      (storageDims == nullptr && storageDimsNum > 0)) {
    Fail(fn, kNullptr, "viewDims or storageDims is NULL with a nonzero count");
    return nullptr;
  }
  if (ItemSize(dataType) == 0) {
    Fail(fn, kParamInvalid, "unsupported aclDataType " + DtypeName(dataType));
    return nullptr;
  }
  if (!IsPlainFormat(format)) {
    Fail(fn, kParamInvalid,
         "format " + std::to_string(format) +
             " is not a plain (ND-like) format; the double stores no private "
             "formats");
    return nullptr;
  }
  auto tensor = std::make_unique<aclTensor>();
  TensorView& v = tensor->view;
  v.present = true;
  v.dtype = dataType;
  v.format = format;
  v.dims.assign(viewDims, viewDims + viewDimsNum);
  v.storage_dims.assign(storageDims, storageDims + storageDimsNum);
  v.offset = offset;
  v.data = tensorData;
  if (stride != nullptr) {
    v.strides.assign(stride, stride + viewDimsNum);
  } else {
    v.strides.assign(viewDimsNum, 1);
    for (int64_t i = static_cast<int64_t>(viewDimsNum) - 2; i >= 0; --i) {
      v.strides[i] = v.strides[i + 1] * v.dims[i + 1];
    }
  }
  int64_t storage_elements = 1;
  for (int64_t d : v.storage_dims) {
    if (d < 0) {
      Fail(fn, kParamInvalid, "negative storage dim");
      return nullptr;
    }
    storage_elements *= d;
  }
  int64_t last = offset;  // largest element index the view reaches
  for (size_t i = 0; i < viewDimsNum; ++i) {
    if (v.dims[i] < 0 || v.strides[i] < 0) {
      Fail(fn, kParamInvalid, "negative view dim or stride");
      return nullptr;
    }
    if (v.dims[i] > 0) last += (v.dims[i] - 1) * v.strides[i];
  }
  if (offset < 0 || (v.Numel() > 0 && last >= storage_elements)) {
    Fail(fn, kParamInvalid,
         "view (offset " + std::to_string(offset) + ", last element " +
             std::to_string(last) + ") does not fit in the " +
             std::to_string(storage_elements) + "-element storage");
    return nullptr;
  }
  std::string why;
  if (!CheckAddress(tensorData, v.StorageBytes(), &why)) {
    Fail(fn, kParamInvalid, "tensorData: " + why);
    return nullptr;
  }
  return Register(std::move(tensor));
}

DOUBLE_API aclnnStatus aclDestroyTensor(const aclTensor* tensor) {
  return Destroy("aclDestroyTensor", tensor, Kind::kTensor);
}

DOUBLE_API aclScalar* aclCreateScalar(void* value, int32_t dataType) {
  if (value == nullptr) {
    Fail("aclCreateScalar", kNullptr, "value is NULL");
    return nullptr;
  }
  auto scalar = std::make_unique<aclScalar>();
  scalar->dtype = dataType;
  // The value is copied now (common_types.cpp aclScalar::aclScalar).
  TensorView view;
  view.dtype = dataType;
  view.data = value;
  if (ItemSize(dataType) == 0) {
    Fail("aclCreateScalar", kParamInvalid,
         "unsupported aclDataType " + DtypeName(dataType));
    return nullptr;
  }
  scalar->value = LoadDouble(view, 0);
  scalar->int_value = LoadInt(view, 0);
  return Register(std::move(scalar));
}

DOUBLE_API aclnnStatus aclDestroyScalar(const aclScalar* scalar) {
  return Destroy("aclDestroyScalar", scalar, Kind::kScalar);
}

DOUBLE_API aclIntArray* aclCreateIntArray(const int64_t* value, uint64_t size) {
  return CreateArray<aclIntArray>("aclCreateIntArray", value, size);
}

DOUBLE_API aclnnStatus aclDestroyIntArray(const aclIntArray* array) {
  return Destroy("aclDestroyIntArray", array, Kind::kIntArray);
}

DOUBLE_API aclBoolArray* aclCreateBoolArray(const bool* value, uint64_t size) {
  return CreateArray<aclBoolArray>("aclCreateBoolArray", value, size);
}

DOUBLE_API aclnnStatus aclDestroyBoolArray(const aclBoolArray* array) {
  return Destroy("aclDestroyBoolArray", array, Kind::kBoolArray);
}

DOUBLE_API aclFloatArray* aclCreateFloatArray(const float* value,
                                              uint64_t size) {
  return CreateArray<aclFloatArray>("aclCreateFloatArray", value, size);
}

DOUBLE_API aclnnStatus aclDestroyFloatArray(const aclFloatArray* array) {
  return Destroy("aclDestroyFloatArray", array, Kind::kFloatArray);
}

DOUBLE_API aclTensorList* aclCreateTensorList(const aclTensor* const* value,
                                              uint64_t size) {
  if (value == nullptr && size > 0) {
    Fail("aclCreateTensorList", kNullptr, "value is NULL");
    return nullptr;
  }
  auto list = std::make_unique<aclTensorList>();
  for (uint64_t i = 0; i < size; ++i) {
    std::string why;
    if (LookupObject(value[i], Kind::kTensor, &why) == nullptr) {
      Fail("aclCreateTensorList", kParamInvalid,
           "element " + std::to_string(i) + ": " + why);
      return nullptr;
    }
    list->tensors.push_back(const_cast<aclTensor*>(value[i]));
  }
  return Register(std::move(list));
}

DOUBLE_API aclnnStatus aclDestroyTensorList(const aclTensorList* list) {
  if (list == nullptr) return kSuccess;
  std::string why;
  auto* l =
      static_cast<aclTensorList*>(LookupObject(list, Kind::kTensorList, &why));
  if (l == nullptr) return Fail("aclDestroyTensorList", kParamInvalid, why);
  // The list owns its elements (acl_op_api.cpp:157): destroy them too; one
  // destroyed before is a double free, reported after the rest are freed.
  int status = kSuccess;
  for (aclTensor* t : l->tensors) {
    if (!Retire(t, Kind::kTensor, &why)) {
      status = Fail(
          "aclDestroyTensorList", kParamInvalid,
          "element " + why + " (aclDestroyTensorList destroys its elements)");
    }
  }
  Retire(l, Kind::kTensorList, &why);
  return status;
}

DOUBLE_API aclnnStatus aclSetAclOpExecutorRepeatable(aclOpExecutor* executor) {
  const char* fn = "aclSetAclOpExecutorRepeatable";
  if (executor == nullptr) {
    return Fail(fn, kInnerNullptr, "executor is NULL");  // documented: 561103
  }
  int status = kSuccess;
  aclOpExecutor* ex = LiveExecutor(fn, executor, &status);
  if (ex == nullptr) return status;
  ex->repeatable = true;
  return LogStatus(fn, kSuccess, ex->id);
}

DOUBLE_API aclnnStatus aclDestroyAclOpExecutor(aclOpExecutor* executor) {
  const char* fn = "aclDestroyAclOpExecutor";
  if (executor == nullptr) return kSuccess;
  int status = kSuccess;
  aclOpExecutor* ex = LiveExecutor(fn, executor, &status);
  if (ex == nullptr) return status;
  if (!ex->repeatable) {
    // Allowed by the docs only for repeatable executors: the others belong to
    // their phase 2, which would then run a freed executor.
    return Fail(fn, kParamInvalid,
                "executor is not repeatable (its phase 2 frees it)", ex->id);
  }
  const int64_t id = ex->id;
  std::string why;
  Retire(ex, Kind::kExecutor, &why);
  return LogStatus(fn, kSuccess, id);
}

DOUBLE_API aclnnStatus aclSetInputTensorAddr(aclOpExecutor* executor,
                                             const size_t index,
                                             aclTensor* tensor, void* addr) {
  return SetIndexedAddr("aclSetInputTensorAddr", executor, index, true, false,
                        tensor, addr);
}

DOUBLE_API aclnnStatus aclSetOutputTensorAddr(aclOpExecutor* executor,
                                              const size_t index,
                                              aclTensor* tensor, void* addr) {
  return SetIndexedAddr("aclSetOutputTensorAddr", executor, index, false, true,
                        tensor, addr);
}

DOUBLE_API aclnnStatus aclSetTensorAddr(aclOpExecutor* executor,
                                        const size_t index, aclTensor* tensor,
                                        void* addr) {
  return SetIndexedAddr("aclSetTensorAddr", executor, index, true, true, tensor,
                        addr);
}

DOUBLE_API aclnnStatus aclSetDynamicInputTensorAddr(aclOpExecutor* executor,
                                                    size_t irIndex,
                                                    const size_t relativeIndex,
                                                    aclTensorList* tensors,
                                                    void* addr) {
  const char* fn = "aclSetDynamicInputTensorAddr";
  int status = kSuccess;
  aclOpExecutor* ex = LiveExecutor(fn, executor, &status);
  if (ex == nullptr) return status;
  if (irIndex >= ex->ir_inputs.size() || !ex->ir_inputs[irIndex].list ||
      relativeIndex >= static_cast<size_t>(ex->ir_inputs[irIndex].count)) {
    return Fail(fn, kParamInvalid,
                "irIndex " + std::to_string(irIndex) + " / relativeIndex " +
                    std::to_string(relativeIndex) +
                    " is not an element of a tensor-list input",
                ex->id);
  }
  aclTensor* element = nullptr;
  if (tensors != nullptr) {
    std::string why;
    auto* l = static_cast<aclTensorList*>(
        LookupObject(tensors, Kind::kTensorList, &why));
    if (l == nullptr) return Fail(fn, kParamInvalid, why, ex->id);
    if (relativeIndex < l->tensors.size()) element = l->tensors[relativeIndex];
  }
  const auto& ir = ex->ir_inputs[irIndex];
  return SetSlotAddr(fn, ex, ex->inputs[ir.first_input + relativeIndex],
                     element, addr);
}

DOUBLE_API aclnnStatus aclSetRawTensorAddr(aclTensor* tensor, void* addr) {
  const char* fn = "aclSetRawTensorAddr";
  std::string why;
  auto* t = static_cast<aclTensor*>(LookupObject(tensor, Kind::kTensor, &why));
  if (t == nullptr) return Fail(fn, kParamInvalid, why);
  if (!CheckAddress(addr, t->view.StorageBytes(), &why)) {
    return Fail(fn, kParamInvalid, why);
  }
  // Only the descriptor changes: executors made from it keep their snapshot.
  t->view.data = addr;
  return LogStatus(fn, kSuccess);
}

DOUBLE_API aclnnStatus aclnnInit(const char* /*configPath*/) {
  return LogStatus("aclnnInit", kSuccess);
}

DOUBLE_API aclnnStatus aclnnFinalize() {
  return LogStatus("aclnnFinalize", kSuccess);
}

DOUBLE_API size_t polyopsDoubleLiveDescriptors(void) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.live.size() - r.live_executors;
}

DOUBLE_API size_t polyopsDoubleLiveExecutors(void) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.live_executors;
}
