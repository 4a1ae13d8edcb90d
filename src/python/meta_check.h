// The fakes' validation (python/polyops/_torch_library.py, `check`): each
// op's base class constructor (src/base/<op>.h, the checks every slot runs)
// on views without data. In polyops._C, so it needs no torch header: tensors
// arrive as (sizes, strides, dtype, device) tuples. The per-op functions are
// generated (scripts/generate_wrappers.py, emit_meta_checks);
// docs/user/torch.md.
#ifndef POLYOPS_PYTHON_META_CHECK_H_
#define POLYOPS_PYTHON_META_CHECK_H_

#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "python/arguments.h"
#include "python/tensor_exchange.h"

namespace polyops::python {

// `values` maps the op's parameter names to None, a number, a torch.dtype,
// a tensor's (sizes, strides, dtype, device) or a list of those, where
// device is (type, index, text) with polyops' type names ("npu" for torch's
// PrivateUse1). Raises what the kernel would raise for the same shapes,
// dtypes and devices; returns the (shape, dtype) of each output the
// overload allocates (Default<Out>), in order.
py::list CheckMeta(const std::string& op, const std::string& overload,
                   const py::dict& values);

// The arguments of one CheckMeta call, read as views without data. Tensors
// must be on the device of the op's first tensor (the `_host` mirrors
// excepted, as in Get<Op>); meta tensors are validated as CPU tensors.
class MetaArguments {
 public:
  MetaArguments(py::dict values, const char* op, const char* primary)
      : values_(std::move(values)), op_(op) {
    PyObject* first = Get(primary);
    if (first && PyList_Check(first)) {
      first = PyList_Size(first) ? PyList_GetItem(first, 0) : nullptr;
    }
    if (first) like_ = ToMetaView(first, primary, &primary_);
  }

  // The value of `name`, or nullptr for None or absent.
  PyObject* Get(const char* name) const {
    PyObject* value = PyDict_GetItemString(values_.ptr(), name);
    return value == Py_None ? nullptr : value;
  }
  PyObject* Required(const char* name) const {
    PyObject* value = Get(name);
    POLYOPS_CHECK(value, "polyops.", op_, ": ", name, " is required");
    return value;
  }
  Tensor View(const char* name) const { return Checked(Required(name), name); }
  std::optional<Tensor> OptionalView(const char* name) const {
    if (!Get(name)) return std::nullopt;
    return View(name);
  }
  std::vector<Tensor> Views(const char* name) const {
    PyObject* list = Required(name);
    POLYOPS_CHECK(PyList_Check(list), "polyops.", op_, ": ", name,
                  " must be given as a list");
    std::vector<Tensor> views;
    for (py::handle item : py::reinterpret_borrow<py::list>(list)) {
      views.push_back(Checked(item, name));
    }
    return views;
  }
  ScalarOrTensor ScalarOrView(const char* name) const {
    PyObject* value = Required(name);
    if (PyTuple_Check(value)) return ScalarOrTensor{View(name), 0.0};
    return ScalarOrTensor{std::nullopt, ArgDouble(value, op_, name)};
  }
  // A view on the first tensor's device, for Placeholder.
  const Tensor& Like() const { return like_; }

 private:
  struct MetaDevice {
    std::string type = "cpu";
    int index = 0;
    std::string text = "cpu";  // as torch prints it: "cuda:0"
    bool is_meta() const { return type == "meta"; }
  };

  // (sizes, strides, dtype, device) -> a view without data. Checks what
  // ToView checks without reading memory: dims, dtype, device type.
  Tensor ToMetaView(py::handle value, const char* name,
                    MetaDevice* device) const {
    POLYOPS_CHECK(PyTuple_Check(value.ptr()) && PyTuple_Size(value.ptr()) == 4,
                  "polyops.", op_, ": ", name,
                  " must be given as (sizes, strides, dtype, device)");
    const auto meta = py::reinterpret_borrow<py::tuple>(value);
    const auto sizes = meta[0].cast<std::vector<int64_t>>();
    const auto strides = meta[1].cast<std::vector<int64_t>>();
    const auto ndim = static_cast<int64_t>(sizes.size());
    POLYOPS_CHECK(ndim <= kMaxDims, "polyops.", op_, ": ", name, " has ", ndim,
                  " dims; polyops supports at most ", kMaxDims);
    const DataType dtype = ArgDtype(meta[2].ptr(), op_, name);
    const auto where =
        meta[3].cast<std::tuple<std::string, int, std::string>>();
    *device =
        MetaDevice{std::get<0>(where), std::get<1>(where), std::get<2>(where)};
    return Tensor::FromParts(
        nullptr, static_cast<int>(ndim), sizes.data(), strides.data(), dtype,
        device->is_meta() ? Device{} : ToDevice(*device, name));
  }

  Device ToDevice(const MetaDevice& device, const char* name) const {
    if (const DeviceInfo* info = FindDeviceNamed(device.type)) {
      return Device{info->type,
                    info->type == Device::Type::kCpu ? 0 : device.index};
    }
    throw NotImplemented(detail::Concat(
        "polyops.", op_, " is not supported for ", name, " on device '",
        device.text, "' because polyops runs on ", DeviceNames(" and "),
        " tensors"));
  }

  // As Get<Op>'s CheckDevice, and a meta tensor never pairs with another.
  Tensor Checked(py::handle value, const char* name) const {
    MetaDevice device = primary_;
    const Tensor view = ToMetaView(value, name, &device);
    const std::string_view text(name);
    if (text.size() > 5 && text.substr(text.size() - 5) == "_host") {
      return view;  // host mirrors live on the CPU: the base class checks
    }
    POLYOPS_CHECK(device.is_meta() == primary_.is_meta(), "polyops.", op_, ": ",
                  name, " is on ", device.text,
                  " but the op runs on the device of its first tensor, ",
                  primary_.text);
    CheckDevice(view, like_.device(), op_, name);
    return view;
  }

  py::dict values_;
  const char* op_;
  MetaDevice primary_;
  Tensor like_;
};

// (shape, dtype) of a placeholder, as CheckMeta returns it.
inline py::tuple MetaResult(const Tensor& view) {
  py::tuple shape(view.ndim());
  for (int d = 0; d < view.ndim(); ++d) shape[d] = view.size(d);
  return py::make_tuple(shape, DtypeObject(view.dtype()));
}

}  // namespace polyops::python

#endif  // POLYOPS_PYTHON_META_CHECK_H_
