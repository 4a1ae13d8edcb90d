// The parts of the DLPack ABI (https://dmlc.github.io/dlpack/latest/, v1.x)
// that polyops uses to read torch tensors without torch's headers: DLTensor
// and the C exchange API that torch >= 2.10 publishes as the capsule
// torch.Tensor.__dlpack_c_exchange_api__ (docs/user/torch.md). Declared here
// from the specification; the layouts are the standard's and must not
// change.
#ifndef POLYOPS_PYTHON_DLPACK_H_
#define POLYOPS_PYTHON_DLPACK_H_

#include <cstdint>

namespace polyops::python::dlpack {

enum DeviceType : int32_t {
  kCpu = 1,
  kCuda = 2,
  kExtension = 12,  // torch's PrivateUse1 ("npu")
};

enum TypeCode : uint8_t {
  kInt = 0,
  kUInt = 1,
  kFloat = 2,
  kBfloat = 4,
  kBool = 6,
};

struct Version {
  uint32_t major;
  uint32_t minor;
};

struct Dev {
  int32_t device_type;
  int32_t device_id;
};

struct DType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};

struct DLTensor {
  void* data;
  Dev device;
  int32_t ndim;
  DType dtype;
  int64_t* shape;
  int64_t* strides;  // null: compact row-major
  uint64_t byte_offset;
};

struct ManagedTensorVersioned {
  Version version;
  void* manager_ctx;
  void (*deleter)(ManagedTensorVersioned* self);
  uint64_t flags;
  DLTensor dl_tensor;
};

// Every function returns 0 on success; on failure -1 with a Python error
// set (the allocator reports through `set_error` instead).
struct ExchangeApiHeader {
  Version version;
  ExchangeApiHeader* prev_api;
};

struct ExchangeApi {
  ExchangeApiHeader header;
  int (*managed_tensor_allocator)(DLTensor* prototype,
                                  ManagedTensorVersioned** out, void* error_ctx,
                                  void (*set_error)(void* error_ctx,
                                                    const char* kind,
                                                    const char* message));
  int (*managed_tensor_from_py_object_no_sync)(void* py_object,
                                               ManagedTensorVersioned** out);
  int (*managed_tensor_to_py_object_no_sync)(ManagedTensorVersioned* tensor,
                                             void** out_py_object);
  int (*dltensor_from_py_object_no_sync)(void* py_object, DLTensor* out);
  int (*current_work_stream)(int32_t device_type, int32_t device_id,
                             void** out_current_stream);
};

}  // namespace polyops::python::dlpack

#endif  // POLYOPS_PYTHON_DLPACK_H_
