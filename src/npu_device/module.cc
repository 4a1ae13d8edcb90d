// polyops._npu_device: the Python face of the npu test device, a thin
// binding of runtime.h for polyops._cann_double.
#include <c10/core/Device.h>
#include <c10/core/Stream.h>
#include <c10/util/Exception.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <exception>

#include "npu_device/runtime.h"

namespace {

namespace py = pybind11;
namespace npu = polyops::npu;

c10::Stream MakeStream(int device, int64_t stream_id) {
  return c10::Stream(c10::Stream::UNSAFE,
                     c10::Device(c10::DeviceType::PrivateUse1,
                                 static_cast<c10::DeviceIndex>(device)),
                     stream_id);
}

}  // namespace

PYBIND11_MODULE(_npu_device, m) {
  m.doc() =
      "The 'npu' test device (torch PrivateUse1) over a CANN runtime library. "
      "Use polyops._cann_double.use_cann_double() rather than this module.";
  // c10::Error's what() carries a C++ backtrace; Python callers get the
  // message alone, as from torch's own bindings. Module-local: pybind11
  // shares its translator registry between extension modules, so a global
  // translator would also turn torch's own c10::ValueError, IndexError & co.
  // (and polyops' errors raised through torch.ops) into RuntimeError.
  py::register_local_exception_translator([](std::exception_ptr error) {
    try {
      if (error) std::rethrow_exception(error);
    } catch (const c10::Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what_without_backtrace());
    }
  });
  // c10::DeviceType::PrivateUse1, for torch.Stream(device_type=...).
  m.attr("DEVICE_TYPE") = static_cast<int>(c10::DeviceType::PrivateUse1);
  m.def("init", &npu::Init, py::arg("library_path"), py::arg("device_count"),
        "Load the CANN runtime at library_path and bring up device_count npu "
        "devices (once per process).");
  m.def("is_initialized", &npu::IsInitialized);
  m.def("library_path", &npu::LibraryPath);
  m.def("device_count", [] { return static_cast<int>(npu::DeviceCount()); });
  m.def("current_device",
        [] { return static_cast<int>(npu::CurrentDevice()); });
  m.def("set_device", [](int device) {
    npu::SetDevice(static_cast<c10::DeviceIndex>(device));
  });
  m.def(
      "synchronize",
      [](int device) {
        npu::SynchronizeDevice(static_cast<c10::DeviceIndex>(device));
      },
      py::arg("device") = -1);
  m.def("synchronize_all", &npu::SynchronizeAll);
  m.def(
      "current_stream",
      [](int device) {
        const c10::Stream stream =
            npu::CurrentStream(static_cast<c10::DeviceIndex>(device));
        return py::make_tuple(static_cast<int>(stream.device_index()),
                              stream.id());
      },
      py::arg("device") = -1,
      "(device index, stream id) of the thread's current stream.");
  m.def(
      "set_stream",
      [](int device, int64_t stream_id) {
        return npu::ExchangeStream(MakeStream(device, stream_id)).id();
      },
      "Make stream_id current on device; returns the previous stream id.");
  m.def("new_stream", [](int device) {
    return npu::NewStream(static_cast<c10::DeviceIndex>(device)).id();
  });
  m.def(
      "stream_handle",
      [](int device, int64_t stream_id) {
        return reinterpret_cast<uintptr_t>(
            npu::StreamHandle(MakeStream(device, stream_id)));
      },
      "The aclrtStream of a stream, as an integer.");
  m.def("synchronize_stream", [](int device, int64_t stream_id) {
    npu::SynchronizeStream(MakeStream(device, stream_id));
  });
}
