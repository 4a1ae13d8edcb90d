// The kernels of torch.ops.polyops through torch's stable ABI (the C shim,
// torch/csrc/stable), for every torch >= 2.10: polyops._torch_stable, used
// when polyops._torch_ops (torch's C++ API) was built for another torch.
// Compiled with TORCH_TARGET_VERSION 2.10, so it calls only what torch 2.10
// already exports. What the stable ABI lacks (redispatch, requires_grad,
// version counters, Python exception types) is done by the Python Autograd
// kernel in python/polyops/_torch_library.py; docs/user/torch.md.
#ifndef POLYOPS_PYTHON_TORCH_STABLE_H_
#define POLYOPS_PYTHON_TORCH_STABLE_H_

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "generated/ops_table.h"
#include "python/arguments.h"

namespace polyops::python {

using StableTensor = torch::stable::Tensor;

// torch's codes (c10::ScalarType values, as the shim reports them) of the
// dtypes polyops handles, in DataType order; filled by InitStableCodes.
struct StableCodes {
  int32_t dtypes[kNumDataTypes] = {};
  int32_t cpu = 0;
  int32_t cuda = 0;
  int32_t privateuse1 = 0;
};
const StableCodes& Codes();
void InitStableCodes();

// "torch.complex64" for torch's code of complex64, for messages.
std::string DtypeName(int32_t code);

// The kind of the last error a stable kernel raised on this thread, then
// cleared: "NotImplementedError", "UnsupportedTensor" (a tensor polyops
// cannot read as plain memory; Python finds which and says why) or "". An
// exception leaving a stable kernel reaches Python as RuntimeError unless it
// is a std::invalid_argument (ValueError), so the Python Autograd kernel
// gives the others back their type and message.
std::string TakeErrorKind();
void SetErrorKind(const char* kind);

// Every kernel clears the kind first, so a kind no Python kernel took (under
// inference mode none runs) never labels a later error.
template <typename Fn>
auto TranslateStableErrors(Fn&& fn) -> decltype(fn()) {
  SetErrorKind("");
  try {
    return fn();
  } catch (const InvalidArgument& error) {
    throw std::invalid_argument(error.what());
  } catch (const NotImplemented& error) {
    SetErrorKind("NotImplementedError");
    throw std::runtime_error(error.what());
  }
}

inline void Check(AOTITorchError status) {
  if (status != AOTI_TORCH_SUCCESS) {
    throw Error("polyops: a call into torch's stable C shim failed");
  }
}

inline DataType StableDataType(int32_t code, const char* op, const char* name) {
  for (int i = 0; i < kNumDataTypes; ++i) {
    if (Codes().dtypes[i] == code) return static_cast<DataType>(i);
  }
  throw NotImplemented(detail::Concat(
      "polyops.", op, " is not supported for ", name, "=", DtypeName(code),
      " because polyops handles bool, int8/16/32/64, uint8, float16, "
      "bfloat16, float32 and float64 only"));
}

inline DataType ToDataType(torch::headeronly::ScalarType type, const char* op,
                           const char* name) {
  return StableDataType(static_cast<int32_t>(type), op, name);
}

inline Device StableDevice(AtenTensorHandle tensor, const char* op,
                           const char* name) {
  int32_t type = 0;
  int32_t index = 0;
  Check(aoti_torch_get_device_type(tensor, &type));
  Check(aoti_torch_get_device_index(tensor, &index));
  if (type == Codes().cpu) return Device{Device::Type::kCpu, 0};
  if (type == Codes().cuda) return Device{Device::Type::kCuda, index};
  if (type == Codes().privateuse1) return Device{Device::Type::kAscend, index};
  throw NotImplemented(detail::Concat(
      "polyops.", op, " is not supported for ", name,
      " on this device because polyops runs on cpu, cuda and npu tensors"));
}

// The dispatcher routes only plain strided tensors here (FakeTensor,
// functionalization, vmap and negated / conjugated views have keys above
// the backend's), so the reads are those of the view itself plus the
// storage bound that keeps a kernel inside memory the tensor owns.
inline Tensor ToView(const StableTensor& tensor, const char* op,
                     const char* name) {
  AtenTensorHandle handle = tensor.get();
  int64_t ndim = 0;
  Check(aoti_torch_get_dim(handle, &ndim));
  POLYOPS_CHECK(ndim <= kMaxDims, "polyops.", op, ": ", name, " has ", ndim,
                " dims; polyops supports at most ", kMaxDims);
  int32_t code = 0;
  Check(aoti_torch_get_dtype(handle, &code));
  const DataType dtype = StableDataType(code, op, name);
  const Device device = StableDevice(handle, op, name);
  int64_t* sizes = nullptr;
  int64_t* strides = nullptr;
  void* data = nullptr;
  int64_t numel = 0;
  Check(aoti_torch_get_sizes(handle, &sizes));
  Check(aoti_torch_get_strides(handle, &strides));
  Check(aoti_torch_get_data_ptr(handle, &data));
  Check(aoti_torch_get_numel(handle, &numel));
  if (numel > 0) {
    int64_t offset = 0;
    int64_t storage_bytes = 0;
    Check(aoti_torch_get_storage_offset(handle, &offset));
    Check(aoti_torch_get_storage_size(handle, &storage_bytes));
    const int64_t needed =
        StorageBytesNeeded(offset, ndim, sizes, strides, DataTypeSize(dtype));
    if (!data || storage_bytes < needed) {
      SetErrorKind("UnsupportedTensor");
      throw std::runtime_error(detail::Concat(
          "polyops.", op, " is not supported for ", name,
          " because its storage holds no data for it (", storage_bytes,
          " bytes, the view reaches byte ", needed, ")"));
    }
  }
  return Tensor::FromParts(data, static_cast<int>(ndim), sizes, strides, dtype,
                           device)
      .WithUnitStridesNormalized();
}

inline std::optional<Tensor> ToOptionalView(
    const std::optional<StableTensor>& tensor, const char* op,
    const char* name) {
  if (!tensor) return std::nullopt;
  return ToView(*tensor, op, name);
}

inline std::vector<Tensor> ToViews(const std::vector<StableTensor>& tensors,
                                   const char* op, const char* name) {
  std::vector<Tensor> views;
  views.reserve(tensors.size());
  for (const StableTensor& tensor : tensors) {
    views.push_back(ToView(tensor, op, name));
  }
  return views;
}

// Allocates the placeholder's tensor on `like`'s device and points the view
// at it.
inline StableTensor Allocate(std::optional<Tensor>& view,
                             const StableTensor& like) {
  int32_t type = 0;
  int32_t index = 0;
  Check(aoti_torch_get_device_type(like.get(), &type));
  Check(aoti_torch_get_device_index(like.get(), &index));
  int64_t strides[kMaxDims] = {};
  for (int d = 0; d < view->ndim(); ++d) strides[d] = view->stride(d);
  AtenTensorHandle handle = nullptr;
  Check(aoti_torch_empty_strided(
      view->ndim(), view->shape(), strides,
      Codes().dtypes[static_cast<int>(view->dtype())], type, index, &handle));
  StableTensor tensor(handle);
  void* data = nullptr;
  Check(aoti_torch_get_data_ptr(handle, &data));
  view = view->WithData(data);
  return tensor;
}

// The Negative and Conjugate keys: polyops reads raw memory, so it refuses
// views whose math bits say the raw values are not the values.
[[noreturn]] inline void RefuseMathBits(const char* op) {
  SetErrorKind("UnsupportedTensor");
  throw std::runtime_error(detail::Concat(
      "polyops.", op,
      " is not supported for a view with torch's negative or conjugate bit "
      "set (e.g. z.conj().imag), whose memory holds the values before "
      "negation; pass .resolve_neg() / .resolve_conj() of it"));
}

// Registers every kernel (generated torch_stable.cc) for the CPU key and the
// Negative / Conjugate keys. The schemas are defined from Python first.
// Idempotent.
void RegisterStableKernels();

}  // namespace polyops::python

#endif  // POLYOPS_PYTHON_TORCH_STABLE_H_
