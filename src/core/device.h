#ifndef POLYOPS_CORE_DEVICE_H_
#define POLYOPS_CORE_DEVICE_H_

#include <cstdint>

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

// The names torch uses for the device ("npu" is torch_npu's PrivateUse1).
constexpr const char* DeviceTypeName(Device::Type type) {
  switch (type) {
    case Device::Type::kCpu:
      return "cpu";
    case Device::Type::kCuda:
      return "cuda";
    case Device::Type::kAscend:
      return "npu";
    default:
      return "unknown";
  }
}

}  // namespace polyops

#endif  // POLYOPS_CORE_DEVICE_H_
