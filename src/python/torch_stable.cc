// The polyops._torch_stable extension: torch.ops.polyops' kernels through
// torch's stable ABI (python/torch_stable.h), for a torch that
// polyops._torch_ops was not built for. Like _torch_ops it runs no kernel
// itself: it calls polyops._C's table of entry points.
#include "python/torch_stable.h"

#include <string>
#include <utility>

namespace polyops::python {
namespace {

const OpsTable* ops_table = nullptr;
StableCodes codes;
thread_local const char* error_kind = "";  // a string literal

}  // namespace

const OpsTable& Ops() { return *ops_table; }
const StableCodes& Codes() { return codes; }

void InitStableCodes() {
  codes.dtypes[static_cast<int>(DataType::kBool)] = aoti_torch_dtype_bool();
  codes.dtypes[static_cast<int>(DataType::kUInt8)] = aoti_torch_dtype_uint8();
  codes.dtypes[static_cast<int>(DataType::kInt8)] = aoti_torch_dtype_int8();
  codes.dtypes[static_cast<int>(DataType::kInt16)] = aoti_torch_dtype_int16();
  codes.dtypes[static_cast<int>(DataType::kInt32)] = aoti_torch_dtype_int32();
  codes.dtypes[static_cast<int>(DataType::kInt64)] = aoti_torch_dtype_int64();
  codes.dtypes[static_cast<int>(DataType::kFloat16)] =
      aoti_torch_dtype_float16();
  codes.dtypes[static_cast<int>(DataType::kBFloat16)] =
      aoti_torch_dtype_bfloat16();
  codes.dtypes[static_cast<int>(DataType::kFloat32)] =
      aoti_torch_dtype_float32();
  codes.dtypes[static_cast<int>(DataType::kFloat64)] =
      aoti_torch_dtype_float64();
  codes.cpu = aoti_torch_device_type_cpu();
  codes.cuda = aoti_torch_device_type_cuda();
  codes.privateuse1 = aoti_torch_device_type_privateuse1();
}

std::string DtypeName(int32_t code) {
  for (int i = 0; i < kNumDataTypes; ++i) {
    if (codes.dtypes[i] == code) {
      return detail::Concat("torch.", DataTypeName(static_cast<DataType>(i)));
    }
  }
  const std::pair<int32_t (*)(), const char*> others[] = {
      {aoti_torch_dtype_complex32, "complex32"},
      {aoti_torch_dtype_complex64, "complex64"},
      {aoti_torch_dtype_complex128, "complex128"},
      {aoti_torch_dtype_uint16, "uint16"},
      {aoti_torch_dtype_uint32, "uint32"},
      {aoti_torch_dtype_uint64, "uint64"},
      {aoti_torch_dtype_float8_e4m3fn, "float8_e4m3fn"},
      {aoti_torch_dtype_float8_e5m2, "float8_e5m2"},
      {aoti_torch_dtype_float8_e4m3fnuz, "float8_e4m3fnuz"},
      {aoti_torch_dtype_float8_e5m2fnuz, "float8_e5m2fnuz"},
  };
  for (const auto& [get, name] : others) {
    if (get() == code) return detail::Concat("torch.", name);
  }
  return detail::Concat("torch dtype code ", code);
}

std::string TakeErrorKind() { return std::exchange(error_kind, ""); }
void SetErrorKind(const char* kind) { error_kind = kind; }

PYBIND11_MODULE(_torch_stable, module) {
  RegisterErrorTranslator();
  ops_table = ImportOpsTable();
  InitStableCodes();
  // python/polyops/_torch_library.py defines the schemas, then calls this.
  module.def("_register_kernels", &RegisterStableKernels);
  module.def("_take_error_kind", &TakeErrorKind);
  module.attr("_max_dims") = kMaxDims;
}

}  // namespace polyops::python
