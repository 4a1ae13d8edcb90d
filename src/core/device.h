#ifndef POLYOPS_CORE_DEVICE_H_
#define POLYOPS_CORE_DEVICE_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace polyops {

struct Device {
  // kAny is not a real device: it tags the dispatching front of Operator.
  enum class Type : int8_t { kCpu = 0, kCuda = 1, kAscend = 2, kAny = 3 };
  static constexpr int kNumTypes = 3;

  Type type = Type::kCpu;
  int index = 0;

  bool operator==(const Device& other) const {
    return type == other.type && index == other.index;
  }
  bool operator!=(const Device& other) const { return !(*this == other); }
};

// The device registry: one row per device (docs/contributing/add_device.md).
// The generator reads these rows too (scripts/codegen/model.py: folder,
// enumerator, dispatch key, slot suffix), and polyops._C lists the names in
// this order (_C._devices), so keep each row on one line.
struct DeviceInfo {
  Device::Type type;
  const char* name;          // torch's device type, what callers pass: "npu"
  const char* folder;        // src/<folder>/, the slot table's column
  const char* dispatch_key;  // torch.ops.polyops kernels' c10::DispatchKey
  int dlpack_code;           // DLDeviceType of its tensors (kDLExtDev: 12)
  const char* slot_suffix;   // slot headers: src/<folder>/<op>/<name><suffix>
};

inline constexpr DeviceInfo kDevices[] = {
    {Device::Type::kCpu, "cpu", "cpu", "CPU", 1, ".h"},
    {Device::Type::kCuda, "cuda", "cuda", "CUDA", 2, ".cuh"},
    {Device::Type::kAscend, "npu", "ascend", "PrivateUse1", 12, ".h"},
};
static_assert(sizeof(kDevices) / sizeof(kDevices[0]) == Device::kNumTypes);

// The registry row of `type`; nullptr for kAny.
constexpr const DeviceInfo* FindDevice(Device::Type type) {
  for (const DeviceInfo& info : kDevices) {
    if (info.type == type) return &info;
  }
  return nullptr;
}

// The row whose torch name is `name` ("npu"); nullptr if none.
inline const DeviceInfo* FindDeviceNamed(std::string_view name) {
  for (const DeviceInfo& info : kDevices) {
    if (name == info.name) return &info;
  }
  return nullptr;
}

// "'cpu', 'cuda' or 'npu'", for messages.
inline std::string DeviceNames(const char* last_separator = " or ") {
  std::string names;
  for (const DeviceInfo& info : kDevices) {
    if (!names.empty()) {
      names +=
          &info == &kDevices[Device::kNumTypes - 1] ? last_separator : ", ";
    }
    names += std::string("'") + info.name + "'";
  }
  return names;
}

// The names torch uses for the device ("npu" is torch_npu's PrivateUse1).
constexpr const char* DeviceTypeName(Device::Type type) {
  const DeviceInfo* info = FindDevice(type);
  return info ? info->name : "unknown";
}

}  // namespace polyops

#endif  // POLYOPS_CORE_DEVICE_H_
