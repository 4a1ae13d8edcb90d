// Reading torch tensors through DLPack and torch's Python-level entry points:
// see tensor_exchange.h. No torch header.
#include "python/tensor_exchange.h"

#include <string>
#include <unordered_map>

#include "python/dlpack.h"

namespace polyops::python {
namespace {

// A METH_NOARGS / METH_O builtin or method descriptor, called through its C
// function when the flags allow (a few ns) and through vectorcall otherwise.
class Callable {
 public:
  void Bind(PyObject* callable) {
    callable_ = callable;
    const PyMethodDef* def = nullptr;
    if (PyCFunction_Check(callable)) {
      def = reinterpret_cast<PyCFunctionObject*>(callable)->m_ml;
      self_ = PyCFunction_GET_SELF(callable);
    } else if (Py_IS_TYPE(callable, &PyMethodDescr_Type)) {
      def = reinterpret_cast<PyMethodDescrObject*>(callable)->d_method;
      method_ = true;
    }
    if (def && (def->ml_flags & (METH_NOARGS | METH_O)) == def->ml_flags) {
      function_ = def->ml_meth;
    }
  }

  // A bound builtin: f(); an unbound method: obj.f().
  PyObject* operator()(PyObject* argument = nullptr) const {
    if (function_) {
      return method_ ? function_(argument, nullptr)
                     : function_(self_, argument);
    }
    PyObject* const args[1] = {argument};
    return PyObject_Vectorcall(callable_, args, argument ? 1 : 0, nullptr);
  }

 private:
  PyObject* callable_ = nullptr;
  PyObject* self_ = nullptr;
  PyCFunction function_ = nullptr;
  bool method_ = false;  // an unbound method: the argument is `self`
};

struct Torch {
  const dlpack::ExchangeApi* exchange = nullptr;
  PyTypeObject* tensor_type = nullptr;
  PyTypeObject* parameter_type = nullptr;
  PyTypeObject* base_type = nullptr;  // torch._C.TensorBase
  PyGetSetDef* requires_grad = nullptr;
  PyGetSetDef* is_leaf = nullptr;
  Callable is_neg;
  Callable is_inference;
  Callable is_grad_enabled;
  Callable is_inference_mode_enabled;
  Callable increment_version;  // takes a tuple of tensors
  PyObject* dtypes[kNumDataTypes] = {};
  // Subclass -> whether it has __torch_dispatch__ (types are never freed).
  std::unordered_map<PyTypeObject*, bool> dispatches_in_python;
};

Torch torch_;  // filled once by InitTensorExchange, under the GIL

bool Truth(PyObject* result) {
  if (!result) throw py::error_already_set();
  const bool truth = result == Py_True;
  Py_DECREF(result);
  return truth;
}

bool Get(PyGetSetDef* getter, PyObject* object) {
  return Truth(getter->get(object, getter->closure));
}

PyGetSetDef* GetterOf(const py::object& type, const char* name) {
  py::object descriptor = type.attr("__dict__")[name];
  if (!Py_IS_TYPE(descriptor.ptr(), &PyGetSetDescr_Type)) {
    throw py::import_error(detail::Concat(
        "polyops: torch.Tensor.", name, " is not a C property in this torch"));
  }
  PyGetSetDef* def =
      reinterpret_cast<PyGetSetDescrObject*>(descriptor.ptr())->d_getset;
  descriptor.release();  // kept for the process, as the type keeps it
  return def;
}

py::object Tool(const char* name) {
  return py::module_::import("polyops._tensor_errors").attr(name);
}

// Raises the reason `tensor` cannot be read (the slow path, in Python, in
// the order of the C++ checks of torch_tensors.h); `reason` is what
// the exchange API said, if it refused.
[[noreturn]] void Explain(TensorArg tensor, const char* op, const char* name,
                          const std::string& reason = "") {
  Tool("explain")(py::handle(tensor.object), op, name, kMaxDims, reason);
  throw Error(detail::Concat("polyops.", op, ": cannot read ", name,
                             " through DLPack", reason.empty() ? "" : " (",
                             reason, reason.empty() ? "" : ")"));
}

std::string TakePythonError() {
  py::error_already_set error;
  return error.what();
}

// Through the registry's DLPack codes (core/device.h); torch exports its
// PrivateUse1 ("npu") as kDLExtDev.
bool ToDevice(dlpack::Dev device, Device* result) {
  for (const DeviceInfo& info : kDevices) {
    if (info.dlpack_code == device.device_type) {
      const bool cpu = info.type == Device::Type::kCpu;
      *result = Device{info.type, cpu ? 0 : device.device_id};
      return true;
    }
  }
  return false;
}

dlpack::Dev ToDlDevice(Device device) {
  const bool cpu = device.type == Device::Type::kCpu;
  return {FindDevice(device.type)->dlpack_code, cpu ? 0 : device.index};
}

dlpack::DType ToDlType(DataType dtype) {
  const auto bits = static_cast<uint8_t>(8 * DataTypeSize(dtype));
  switch (dtype) {
    case DataType::kBool:
      return {dlpack::kBool, 8, 1};
    case DataType::kUInt8:
      return {dlpack::kUInt, 8, 1};
    case DataType::kInt8:
    case DataType::kInt16:
    case DataType::kInt32:
    case DataType::kInt64:
      return {dlpack::kInt, bits, 1};
    case DataType::kBFloat16:
      return {dlpack::kBfloat, 16, 1};
    default:
      return {dlpack::kFloat, bits, 1};
  }
}

// The inverse of ToDlType: false for a type polyops does not handle.
bool ToDataType(dlpack::DType type, DataType* result) {
  for (int i = 0; i < kNumDataTypes; ++i) {
    const dlpack::DType candidate = ToDlType(static_cast<DataType>(i));
    if (candidate.code == type.code && candidate.bits == type.bits &&
        candidate.lanes == type.lanes) {
      *result = static_cast<DataType>(i);
      return true;
    }
  }
  return false;
}

void SetAllocationError(void* context, const char* kind, const char* message) {
  *static_cast<std::string*>(context) = detail::Concat(kind, ": ", message);
}

// The portable TensorFlags: torch's Python-level functions.
bool PortableIsNeg(PyObject* tensor) { return Truth(torch_.is_neg(tensor)); }
bool PortableRequiresGrad(PyObject* tensor) {
  return Get(torch_.requires_grad, tensor);
}
bool PortableIsLeaf(PyObject* tensor) { return Get(torch_.is_leaf, tensor); }
bool PortableIsInference(PyObject* tensor) {
  return Truth(torch_.is_inference(tensor));
}
bool PortableGradEnabled() { return Truth(torch_.is_grad_enabled()); }
bool PortableInferenceModeEnabled() {
  return Truth(torch_.is_inference_mode_enabled());
}

void PortableBumpVersion(PyObject* tensor) {
  // One 1-tuple, refilled per call: a new tuple per call would trigger the
  // cyclic garbage collector every few hundred calls.
  static PyObject* tensors = nullptr;
  if (!tensors || Py_REFCNT(tensors) != 1) {
    Py_XDECREF(tensors);
    tensors = PyTuple_New(1);
    if (!tensors) throw py::error_already_set();
  }
  Py_INCREF(tensor);
  PyTuple_SET_ITEM(tensors, 0, tensor);
  PyObject* result = torch_.increment_version(tensors);
  PyTuple_SET_ITEM(tensors, 0, nullptr);
  Py_DECREF(tensor);
  if (!result) throw py::error_already_set();
  Py_DECREF(result);
}

TensorFlags flags_;

}  // namespace

TensorFlags& GetTensorFlags() { return flags_; }

void UsePortableTensorFlags() {
  flags_ = TensorFlags{&PortableIsNeg,       &PortableRequiresGrad,
                       &PortableIsLeaf,      &PortableIsInference,
                       &PortableGradEnabled, &PortableInferenceModeEnabled,
                       &PortableBumpVersion};
}

void InitTensorExchange() {
  py::module_ torch = py::module_::import("torch");
  py::object tensor = torch.attr("Tensor");
  py::object capsule =
      py::getattr(tensor, "__dlpack_c_exchange_api__", py::none());
  if (capsule.is_none()) {
    throw py::import_error(detail::Concat(
        "polyops needs torch >= 2.10 (torch.Tensor.__dlpack_c_exchange_api__); "
        "this is torch ",
        py::str(torch.attr("__version__")).cast<std::string>()));
  }
  auto* exchange = static_cast<const dlpack::ExchangeApi*>(
      PyCapsule_GetPointer(capsule.ptr(), "dlpack_exchange_api"));
  if (!exchange) throw py::error_already_set();
  if (exchange->header.version.major != 1) {
    throw py::import_error(detail::Concat(
        "polyops reads tensors through DLPack 1.x; this torch offers DLPack ",
        exchange->header.version.major, ".", exchange->header.version.minor));
  }
  capsule.release();  // the API lives as long as torch, i.e. the process
  torch_.exchange = exchange;
  py::module_ c = torch.attr("_C");
  py::object base = c.attr("TensorBase");
  // Kept for the process: torch never frees its types and functions.
  const auto keep = [](py::object object) { return object.release().ptr(); };
  torch_.tensor_type = reinterpret_cast<PyTypeObject*>(keep(tensor));
  torch_.parameter_type =
      reinterpret_cast<PyTypeObject*>(keep(torch.attr("nn").attr("Parameter")));
  torch_.requires_grad = GetterOf(base, "requires_grad");
  torch_.is_leaf = GetterOf(base, "is_leaf");
  py::object methods = base.attr("__dict__");
  torch_.is_neg.Bind(keep(methods["is_neg"]));
  torch_.is_inference.Bind(keep(methods["is_inference"]));
  torch_.base_type = reinterpret_cast<PyTypeObject*>(keep(base));
  torch_.is_grad_enabled.Bind(keep(c.attr("is_grad_enabled")));
  torch_.is_inference_mode_enabled.Bind(
      keep(torch.attr("is_inference_mode_enabled")));
  torch_.increment_version.Bind(keep(c.attr("_increment_version")));
  for (int i = 0; i < kNumDataTypes; ++i) {
    torch_.dtypes[i] = keep(torch.attr(DataTypeName(static_cast<DataType>(i))));
  }
  UsePortableTensorFlags();
}

TensorArg ArgTensor(PyObject* value, const char* op, const char* name) {
  PyTypeObject* type = Py_TYPE(value);
  if (type == torch_.tensor_type || type == torch_.parameter_type) {
    return {value};
  }
  if (!PyObject_TypeCheck(value, torch_.base_type)) {
    ThrowWrongType(value, op, name, "a torch.Tensor");
  }
  auto entry = torch_.dispatches_in_python.find(type);
  if (entry == torch_.dispatches_in_python.end()) {
    // Python code runs here: look the answer up first, then insert.
    const bool dispatches = Tool("dispatches_in_python")(
                                py::handle(reinterpret_cast<PyObject*>(type)))
                                .cast<bool>();
    Py_INCREF(type);
    entry = torch_.dispatches_in_python.emplace(type, dispatches).first;
  }
  if (entry->second) {
    throw NotImplemented(detail::Concat(
        "polyops.", op, " is not supported for ", name, " of type ",
        type->tp_name,
        " because it is a tensor subclass with __torch_dispatch__ (such as "
        "FakeTensor or FunctionalTensor) whose data polyops cannot read; "
        "use torch.ops.polyops.",
        op, ", which torch dispatches for them"));
  }
  return {value};
}

std::vector<TensorArg> ArgTensorList(PyObject* value, const char* op,
                                     const char* name) {
  if (!PyList_Check(value) && !PyTuple_Check(value)) {
    ThrowWrongType(value, op, name, "a list or tuple of torch.Tensor");
  }
  const Py_ssize_t size = PySequence_Fast_GET_SIZE(value);
  PyObject** items = PySequence_Fast_ITEMS(value);
  std::vector<TensorArg> tensors;
  tensors.reserve(size);
  for (Py_ssize_t i = 0; i < size; ++i) {
    tensors.push_back(ArgTensor(items[i], op, name));
  }
  return tensors;
}

TensorArg TensorOrNull(PyObject* value) {
  return value && PyObject_TypeCheck(value, torch_.base_type) ? TensorArg{value}
                                                              : TensorArg{};
}

Tensor ToView(TensorArg tensor, const char* op, const char* name) {
  dlpack::DLTensor dl;
  if (torch_.exchange->dltensor_from_py_object_no_sync(tensor.object, &dl) !=
      0) {
    Explain(tensor, op, name, TakePythonError());
  }
  // DLPack carries no math bits: a negated view would read as its negation.
  // (The conjugate bit only exists on complex tensors, refused below.)
  Device device;
  DataType dtype;
  if (flags_.is_neg(tensor.object) || dl.ndim > kMaxDims ||
      !ToDevice(dl.device, &device) || !ToDataType(dl.dtype, &dtype)) {
    Explain(tensor, op, name);
  }
  char* data = static_cast<char*>(dl.data);
  if (data) data += dl.byte_offset;
  int64_t numel = 1;
  for (int d = 0; d < dl.ndim; ++d) numel *= dl.shape[d];
  // Null data with elements: a storage resized to nothing (or never
  // allocated: FakeTensor, _efficientzerotensor).
  if (!data && numel > 0) Explain(tensor, op, name);
  int64_t compact[kMaxDims];
  const int64_t* strides = dl.strides;
  if (!strides) {
    int64_t stride = 1;
    for (int d = dl.ndim - 1; d >= 0; --d) {
      compact[d] = stride;
      stride *= dl.shape[d];
    }
    strides = compact;
  }
  return Tensor::FromParts(data, dl.ndim, dl.shape, strides, dtype, device)
      .WithUnitStridesNormalized();
}

std::vector<Tensor> ToViews(const std::vector<TensorArg>& tensors,
                            const char* op, const char* name) {
  std::vector<Tensor> views;
  views.reserve(tensors.size());
  for (TensorArg tensor : tensors) views.push_back(ToView(tensor, op, name));
  return views;
}

ScalarOrTensor ArgScalarOrTensor(PyObject* value, const char* op,
                                 const char* name) {
  ScalarOrTensor result;
  if (PyObject_TypeCheck(value, torch_.base_type)) {
    result.tensor = ToView(ArgTensor(value, op, name), op, name);
  } else if (PyBool_Check(value)) {
    ThrowWrongType(value, op, name, "a number or a torch.Tensor");
  } else {
    result.scalar = ArgDouble(value, op, name);
  }
  return result;
}

py::object DtypeObject(DataType dtype) {
  return py::reinterpret_borrow<py::object>(
      torch_.dtypes[static_cast<int>(dtype)]);
}

DataType ArgDtype(PyObject* value, const char* op, const char* name) {
  for (int i = 0; i < kNumDataTypes; ++i) {
    if (value == torch_.dtypes[i]) return static_cast<DataType>(i);
  }
  if (Py_TYPE(value) != Py_TYPE(torch_.dtypes[0])) {
    ThrowWrongType(value, op, name, "a torch.dtype");
  }
  throw NotImplemented(detail::Concat(
      "polyops.", op, " is not supported for ", name, "=",
      py::str(value).cast<std::string>(),
      " because polyops handles bool, int8/16/32/64, uint8, float16, "
      "bfloat16, float32 and float64 only"));
}

py::object Allocate(std::optional<Tensor>& view, TensorArg /*like*/) {
  dlpack::DLTensor prototype{};
  prototype.device = ToDlDevice(view->device());
  prototype.ndim = view->ndim();
  prototype.dtype = ToDlType(view->dtype());
  prototype.shape = const_cast<int64_t*>(view->shape());
  dlpack::ManagedTensorVersioned* managed = nullptr;
  std::string error;
  if (torch_.exchange->managed_tensor_allocator(&prototype, &managed, &error,
                                                &SetAllocationError) != 0 ||
      !managed) {
    throw BackendError(
        detail::Concat("polyops: cannot allocate an output: ", error));
  }
  char* data = static_cast<char*>(managed->dl_tensor.data);
  if (data) data += managed->dl_tensor.byte_offset;
  void* object = nullptr;
  if (torch_.exchange->managed_tensor_to_py_object_no_sync(managed, &object) !=
      0) {
    throw py::error_already_set();
  }
  view = view->WithData(data);
  return py::reinterpret_steal<py::object>(static_cast<PyObject*>(object));
}

GradState CurrentGradState() { return GradState{flags_.grad_enabled()}; }

void CheckWritable(GradState grad, TensorArg tensor, const char* op,
                   const char* name) {
  if (!tensor) return;
  if (flags_.is_inference(tensor.object) && !flags_.inference_mode_enabled()) {
    throw std::runtime_error(detail::Concat(
        "polyops.", op, ": ", name,
        " is an inference tensor; in-place update to an inference tensor "
        "outside InferenceMode is not allowed (as in torch)"));
  }
  if (grad.enabled && flags_.requires_grad(tensor.object) &&
      flags_.is_leaf(tensor.object)) {
    throw std::runtime_error(detail::Concat(
        "polyops.", op, ": ", name,
        " is a leaf tensor that requires grad and cannot be written in "
        "place (as in torch); write under torch.no_grad() or pass a "
        "tensor that does not require grad"));
  }
}

void CheckNoGrad(GradState grad, TensorArg tensor, const char* op,
                 const char* name) {
  POLYOPS_CHECK_T(
      !(grad.enabled && tensor && flags_.requires_grad(tensor.object)),
      NotImplemented, "polyops.", op, " does not support autograd: ", name,
      " requires grad and grad mode is on; call it under torch.no_grad() or "
      "torch.inference_mode(), or pass ",
      name, ".detach()");
}

void BumpVersion(TensorArg tensor) {
  if (tensor) flags_.bump_version(tensor.object);
}

DeviceHooks& GetDeviceHooks() {
  static DeviceHooks hooks;
  return hooks;
}

namespace {

[[noreturn]] void ThrowNoTorchOps(Device device, const char* op) {
  throw BackendError(detail::Concat(
      "polyops.", op, ": ", DeviceTypeName(device.type),
      " tensors need polyops._torch_ops (torch's device and stream API, "
      "built for the torch polyops was compiled with), which is not loaded: "
      "another torch is installed, or POLYOPS_TORCH_STABLE=1 "
      "(docs/user/torch.md, "
      "\"Torch versions\")"));
}

}  // namespace

void* CurrentStream(Device device, const char* op) {
  const DeviceHooks& hooks = GetDeviceHooks();
  if (hooks.current_stream) return hooks.current_stream(device, op);
  if (device.type == Device::Type::kCuda) {
    void* stream = nullptr;
    if (torch_.exchange->current_work_stream(dlpack::kCuda, device.index,
                                             &stream) != 0) {
      throw BackendError(detail::Concat(
          "polyops.", op, ": cannot get torch's current stream of cuda:",
          device.index, " (", TakePythonError(), "); pass stream= explicitly"));
    }
    return stream;
  }
  ThrowNoTorchOps(device, op);
}

void DeviceScope::Enter(Device device, const char* op) {
  const DeviceHooks& hooks = GetDeviceHooks();
  if (!hooks.exchange_device) ThrowNoTorchOps(device, op);
  previous_ = hooks.exchange_device(device);
}

void DeviceScope::Leave() noexcept {
  try {
    GetDeviceHooks().exchange_device(*previous_);
  } catch (...) {
    // Restoring the caller's device cannot fail for a device that was
    // current a moment ago; nothing sensible to do if it does.
  }
}

}  // namespace polyops::python
