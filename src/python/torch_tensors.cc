// The torch C++ side of the bindings: what the torch.library kernels need
// beyond torch_tensors.h, and the device and stream of torch's current
// context for every op call (DeviceScope, CurrentStream).
#include "python/torch_tensors.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <string>

namespace polyops::python {

void ThrowUnsupportedTensor(const at::Tensor& tensor, const char* op,
                            const char* name) {
  const c10::DispatchKeySet keys = tensor.unsafeGetTensorImpl()->key_set();
  const auto unsupported = [&](const char* kind, const char* advice) {
    throw NotImplemented(detail::Concat("polyops.", op,
                                        " is not supported for ", name,
                                        " because it is ", kind, advice));
  };
  if (keys.has(c10::DispatchKey::Negative) ||
      keys.has(c10::DispatchKey::Conjugate)) {
    unsupported(
        "a view with torch's negative or conjugate bit set (e.g. "
        "z.conj().imag), whose memory holds the values before negation",
        "; pass .resolve_neg() / .resolve_conj() of it");
  }
  if (keys.has(c10::DispatchKey::Python) ||
      keys.has(c10::DispatchKey::PythonTLSSnapshot)) {
    unsupported(
        "a tensor subclass with __torch_dispatch__ (such as FakeTensor or "
        "FunctionalTensor) whose data polyops cannot read",
        "; use torch.ops.polyops, which torch dispatches for them");
  }
  if (keys.has(c10::DispatchKey::Functionalize)) {
    unsupported("a functionalization wrapper",
                "; use torch.ops.polyops inside functionalized code");
  }
  if (keys.has(c10::DispatchKey::FuncTorchBatched) ||
      keys.has(c10::DispatchKey::BatchedNestedTensor)) {
    unsupported("a vmap batched tensor",
                "; call polyops outside torch.vmap or use torch.ops.polyops");
  }
  if (keys.has(c10::DispatchKey::FuncTorchGradWrapper)) {
    unsupported("a torch.func transform wrapper", "");
  }
  if (keys.has(c10::DispatchKey::NestedTensor) ||
      tensor.layout() == c10::kJagged) {
    unsupported("a nested tensor", "; pass its dense components");
  }
  if (tensor.layout() != c10::kStrided) {
    throw InvalidArgument(detail::Concat(
        "polyops.", op, ": ", name,
        " must be a dense (strided) tensor, got layout ", tensor.layout()));
  }
  if (!tensor.unsafeGetTensorImpl()->has_storage()) {
    unsupported("a tensor without storage", "");
  }
  throw NotImplemented(detail::Concat(
      "polyops.", op, " is not supported for ", name, " of shape ",
      tensor.sizes(), " with strides ", tensor.strides(), " and offset ",
      tensor.storage_offset(),
      " because its storage holds no data for it (null data pointer or "
      "storage of ",
      tensor.unsafeGetTensorImpl()->storage().nbytes(), " bytes)"));
}

namespace {

void* TorchCurrentStream(Device device, const char* op) {
  const c10::Device torch_device = ToTorchDevice(device);
  try {
    const c10::impl::DeviceGuardImplInterface* guard =
        c10::impl::getDeviceGuardImpl(torch_device.type());
    return guard->getStreamNativeHandle(guard->getStream(torch_device));
  } catch (const c10::Error& error) {
    throw BackendError(detail::Concat(
        "polyops.", op, ": cannot get torch's current stream of ",
        torch_device.str(), " (", error.what_without_backtrace(),
        "); pass stream= explicitly"));
  }
}

Device TorchExchangeDevice(Device device) {
  const c10::Device torch_device = ToTorchDevice(device);
  try {
    const c10::Device previous =
        c10::impl::getDeviceGuardImpl(torch_device.type())
            ->exchangeDevice(torch_device);
    return Device{device.type, previous.index()};
  } catch (const c10::Error& error) {
    throw BackendError(detail::Concat("polyops: cannot make ",
                                      torch_device.str(), " current (",
                                      error.what_without_backtrace(), ")"));
  }
}

}  // namespace

namespace {

// The TensorFlags of the build's torch: direct TensorImpl reads.
bool TorchIsNeg(PyObject* tensor) {
  return THPVariable_Unpack(tensor).is_neg();
}
bool TorchRequiresGrad(PyObject* tensor) {
  return THPVariable_Unpack(tensor).requires_grad();
}
bool TorchIsLeaf(PyObject* tensor) {
  return THPVariable_Unpack(tensor).is_leaf();
}
bool TorchIsInference(PyObject* tensor) {
  return THPVariable_Unpack(tensor).is_inference();
}
bool TorchGradEnabled() { return at::GradMode::is_enabled(); }
bool TorchInferenceModeEnabled() { return c10::InferenceMode::is_enabled(); }
void TorchBumpVersion(PyObject* tensor) {
  const at::Tensor& unpacked = THPVariable_Unpack(tensor);
  // Inference tensors have no version counter (CheckWritable refused them
  // outside InferenceMode), as torch._C._increment_version skips them.
  if (!unpacked.is_inference()) unpacked.unsafeGetTensorImpl()->bump_version();
}

}  // namespace

void InstallTorchTensorFlags(TensorFlags& flags) {
  flags = TensorFlags{&TorchIsNeg,       &TorchRequiresGrad,
                      &TorchIsLeaf,      &TorchIsInference,
                      &TorchGradEnabled, &TorchInferenceModeEnabled,
                      &TorchBumpVersion};
}

void InstallTorchDeviceHooks(DeviceHooks& hooks) {
  hooks.current_stream = &TorchCurrentStream;
  hooks.exchange_device = &TorchExchangeDevice;
}

}  // namespace polyops::python
