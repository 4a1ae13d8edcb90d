// Descriptors and executors of the CANN test double (libnnopbase.so), shared
// with the operators in libopapi.so. Not a CANN header: the opaque types of
// acl_meta.h get their definitions here.
#ifndef POLYOPS_CANN_DOUBLE_NNOPBASE_H_
#define POLYOPS_CANN_DOUBLE_NNOPBASE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "internal.h"

namespace cann_double {

// aclDataType values (acl_base_rt.h).
enum DataType : int32_t {
  kFloat = 0,
  kFloat16 = 1,
  kInt8 = 2,
  kInt32 = 3,
  kUint8 = 4,
  kInt16 = 6,
  kUint16 = 7,
  kUint32 = 8,
  kInt64 = 9,
  kUint64 = 10,
  kDouble = 11,
  kBool = 12,
  kBf16 = 27,
};

// Bytes per element, 0 for a dtype the double does not store.
DOUBLE_INTERNAL size_t ItemSize(int32_t dtype);
DOUBLE_INTERNAL std::string DtypeName(int32_t dtype);
inline bool IsFloating(int32_t d) {
  return d == kFloat || d == kFloat16 || d == kBf16 || d == kDouble;
}

// What an aclTensor describes; executors keep copies ("snapshots").
struct TensorView {
  bool present = false;
  int32_t dtype = -1;
  int32_t format = 2;
  std::vector<int64_t> dims;
  std::vector<int64_t> strides;  // elements
  int64_t offset = 0;            // elements from data to the first element
  std::vector<int64_t> storage_dims;
  void* data = nullptr;

  int64_t Dim() const { return static_cast<int64_t>(dims.size()); }
  int64_t Numel() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
  }
  size_t StorageBytes() const {
    int64_t n = 1;
    for (int64_t d : storage_dims) n *= d;
    return static_cast<size_t>(n) * ItemSize(dtype);
  }
  bool IsContiguous() const {
    int64_t expected = 1;
    for (int64_t i = Dim() - 1; i >= 0; --i) {
      if (dims[i] != 1 && strides[i] != expected) return false;
      expected *= dims[i];
    }
    return true;
  }
};

enum class Kind {
  kTensor,
  kScalar,
  kIntArray,
  kBoolArray,
  kFloatArray,
  kTensorList,
  kExecutor
};

struct Object {
  explicit Object(Kind k) : kind(k) {}
  virtual ~Object() = default;
  Kind kind;
};

using Compute = std::function<int(const std::vector<TensorView>& slots)>;

}  // namespace cann_double

struct aclTensor : cann_double::Object {
  aclTensor() : Object(cann_double::Kind::kTensor) {}
  cann_double::TensorView view;
};
struct aclScalar : cann_double::Object {
  aclScalar() : Object(cann_double::Kind::kScalar) {}
  int32_t dtype = -1;
  double value = 0;       // floating dtypes
  int64_t int_value = 0;  // integer and bool dtypes
};
struct aclIntArray : cann_double::Object {
  aclIntArray() : Object(cann_double::Kind::kIntArray) {}
  std::vector<int64_t> values;
};
struct aclBoolArray : cann_double::Object {
  aclBoolArray() : Object(cann_double::Kind::kBoolArray) {}
  std::vector<bool> values;
};
struct aclFloatArray : cann_double::Object {
  aclFloatArray() : Object(cann_double::Kind::kFloatArray) {}
  std::vector<float> values;
};
struct aclTensorList : cann_double::Object {
  aclTensorList() : Object(cann_double::Kind::kTensorList) {}
  std::vector<aclTensor*> tensors;
};
struct aclOpExecutor : cann_double::Object {
  aclOpExecutor() : Object(cann_double::Kind::kExecutor) {}
  int64_t id = 0;
  std::string op;  // phase-2 name, e.g. "aclnnAdd"
  uint64_t workspace = 0;
  bool repeatable = false;
  // The snapshot: one slot per tensor argument (absent optional ones too).
  std::vector<cann_double::TensorView> slots;
  std::vector<int> inputs;   // aclSetInputTensorAddr index -> slot
  std::vector<int> outputs;  // aclSetOutputTensorAddr index -> slot
  struct IrInput {
    int first_input;  // index into inputs
    int count;
    bool list;
  };
  std::vector<IrInput> ir_inputs;  // aclSetDynamicInputTensorAddr irIndex
  cann_double::Compute compute;
};

namespace cann_double {

// The live object p of kind `kind`, or nullptr with *why set (destroyed,
// never created, or another kind).
DOUBLE_INTERNAL Object* LookupObject(const void* p, Kind kind,
                                     std::string* why);

// Builds an executor in a GetWorkspaceSize call: registers the tensor
// arguments in signature order, records the first validation failure, and
// logs the call.
class DOUBLE_INTERNAL OpBuilder {
 public:
  // op is the phase-2 name ("aclnnAdd").
  OpBuilder(const char* op, uint64_t* workspace_size, aclOpExecutor** executor);
  ~OpBuilder();
  OpBuilder(const OpBuilder&) = delete;
  OpBuilder& operator=(const OpBuilder&) = delete;

  // Each returns the slot index, or -1 (and records 161001/161002).
  int In(const aclTensor* t, const char* name);
  int OptIn(const aclTensor* t, const char* name);
  int Out(const aclTensor* t, const char* name);
  int OptOut(const aclTensor* t, const char* name);
  int Ref(const aclTensor* t, const char* name);
  // Registers every element as an input; returns the slot of the first.
  int InList(const aclTensorList* list, const char* name, int* count);
  const aclScalar* Scalar(const aclScalar* s, const char* name);
  // nullptr is allowed (optional) unless required.
  const aclIntArray* IntArray(const aclIntArray* a, const char* name,
                              bool required);

  const TensorView& V(int slot) const;
  // Records a failure unless cond; returns cond.
  bool Check(bool cond, int code, const std::string& message);
  bool ok() const { return status_ == kSuccess; }

  // Finishes phase 1: on success stores the workspace size and the executor.
  aclnnStatus Launch(uint64_t workspace, Compute compute);

 private:
  int AddSlot(const aclTensor* t, const char* name, bool required);

  std::string op_;
  uint64_t* workspace_size_;
  aclOpExecutor** executor_out_;
  std::unique_ptr<aclOpExecutor> ex_;
  int status_ = kSuccess;
};

// Phase 2 of every op: checks the executor, workspace and stream, queues the
// executor's computation on a copy of its snapshot, frees non-repeatable
// executors.
DOUBLE_INTERNAL aclnnStatus RunPhase2(const char* op, void* workspace,
                                      uint64_t workspace_size,
                                      aclOpExecutor* executor,
                                      aclrtStream stream);

}  // namespace cann_double

#endif  // POLYOPS_CANN_DOUBLE_NNOPBASE_H_
