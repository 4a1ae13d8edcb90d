// The CANN C interface the Ascend backend calls, resolved with dlopen/dlsym
// at the first call on an NPU tensor: nothing links CANN, no CANN or
// torch_npu header is needed to build, and CPU or CUDA users never load it.
// Signatures and enum values follow CANN's own headers (acl_base_rt.h,
// acl_rt.h, aclnn/acl_meta.h); docs/backends/ascend.md lists their sources.
#ifndef POLYOPS_ASCEND_RUNTIME_CANN_H_
#define POLYOPS_ASCEND_RUNTIME_CANN_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace polyops::ascend {

// Opaque CANN handles, declared by us.
struct AclTensor;
struct AclScalar;
struct AclIntArray;
struct AclTensorList;
struct AclOpExecutor;

using AclError = int;         // aclError
using AclnnStatus = int32_t;  // aclnnStatus
using AclStream = void*;      // aclrtStream

// aclDataType (acl_base_rt.h).
enum class AclDataType : int32_t {
  kFloat = 0,
  kFloat16 = 1,
  kInt8 = 2,
  kInt32 = 3,
  kUInt8 = 4,
  kInt16 = 6,
  kInt64 = 9,
  kDouble = 11,
  kBool = 12,
  kBFloat16 = 27,
};

inline constexpr int32_t kAclFormatNd = 2;        // aclFormat ACL_FORMAT_ND
inline constexpr int kAclMemcpyHostToDevice = 1;  // aclrtMemcpyKind
inline constexpr int kAclMemcpyDeviceToHost = 2;

// The runtime (libascendcl.so) and nnopbase (libnnopbase.so) functions the
// backend uses, resolved together on first use.
struct Runtime {
  AclError (*rt_malloc)(void** dev_ptr, size_t size, int policy);
  AclError (*rt_free)(void* dev_ptr);
  AclError (*rt_synchronize_stream)(AclStream stream);
  AclError (*rt_synchronize_device)();
  AclError (*rt_get_device)(int32_t* device);
  AclError (*rt_set_device)(int32_t device);
  // aclrtMemcpy(dst, destMax, src, count, kind): synchronous.
  AclError (*rt_memcpy)(void* dst, size_t dest_max, const void* src,
                        size_t count, int kind);
  const char* (*get_recent_err_msg)();
  AclTensor* (*create_tensor)(const int64_t* view_dims, uint64_t view_dims_num,
                              AclDataType data_type, const int64_t* stride,
                              int64_t offset, int32_t format,
                              const int64_t* storage_dims,
                              uint64_t storage_dims_num, void* tensor_data);
  AclnnStatus (*destroy_tensor)(const AclTensor* tensor);
  AclScalar* (*create_scalar)(void* value, AclDataType data_type);
  AclnnStatus (*destroy_scalar)(const AclScalar* scalar);
  // The list owns its tensors: aclDestroyTensorList destroys them (trap 13).
  AclTensorList* (*create_tensor_list)(const AclTensor* const* value,
                                       uint64_t size);
  AclnnStatus (*destroy_tensor_list)(const AclTensorList* list);
  AclIntArray* (*create_int_array)(const int64_t* value, uint64_t size);
  AclnnStatus (*destroy_int_array)(const AclIntArray* array);
  AclnnStatus (*set_executor_repeatable)(AclOpExecutor* executor);
  AclnnStatus (*destroy_executor)(AclOpExecutor* executor);
  AclnnStatus (*set_input_tensor_addr)(AclOpExecutor* executor, size_t index,
                                       AclTensor* tensor, void* addr);
  AclnnStatus (*set_output_tensor_addr)(AclOpExecutor* executor, size_t index,
                                        AclTensor* tensor, void* addr);
  // Element `relative_index` of the tensor-list input `ir_index` (inputs
  // counted per parameter, a list being one).
  AclnnStatus (*set_dynamic_input_tensor_addr)(AclOpExecutor* executor,
                                               size_t ir_index,
                                               size_t relative_index,
                                               AclTensorList* tensors,
                                               void* addr);
  // The toolkit version from aclsysGetVersionStr ("8.5.0"), "" if unknown.
  std::string version;
  // Where the libraries were found, for messages.
  std::string directory;
};

// Loads the CANN libraries once. A missing library or symbol throws
// BackendError (RuntimeError in Python) naming it and where polyops looked;
// the next call tries again.
const Runtime& GetRuntime();

// The aclnn symbol `name` from the operator libraries (libopapi.so, or the
// per-repo libopapi_{math,nn,transformer}.so), resolved once and cached.
// Missing: BackendError naming the symbol, the libraries searched, the
// loaded CANN version and `since`, the first CANN version that has it.
void* OpSymbol(const char* name, const char* since);

// Throws BackendError for a non-zero status, with CANN's own message.
void CheckStatus(int status, const char* op, const char* call);

// Whether the runtime is loaded: destructors release CANN objects only then.
bool RuntimeLoaded();

}  // namespace polyops::ascend

#endif  // POLYOPS_ASCEND_RUNTIME_CANN_H_
