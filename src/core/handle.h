#ifndef POLYOPS_CORE_HANDLE_H_
#define POLYOPS_CORE_HANDLE_H_

#include <cstddef>

#include "core/device.h"

namespace polyops {

// What an implementation needs besides its arguments: where to run (the
// device and its stream, null for CPU) and scratch memory the caller owns.
struct Handle {
  Device device;
  void* stream = nullptr;
  void* workspace = nullptr;
  size_t workspace_size = 0;
};

}  // namespace polyops

#endif  // POLYOPS_CORE_HANDLE_H_
