#ifndef POLYOPS_CORE_OP_STATE_H_
#define POLYOPS_CORE_OP_STATE_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/device.h"
#include "core/instance_cache.h"

namespace polyops {

inline constexpr int kMaxImplementations = 8;

struct SlotInfo {
  int index;
  const char* name;  // short and stable: "loop", "omp", "cublas", ...
};

struct SlotTable {
  SlotInfo slots[kMaxImplementations] = {};
  int count = 0;
  int default_index = -1;

  bool Has(int index) const {
    for (int i = 0; i < count; ++i) {
      if (slots[i].index == index) return true;
    }
    return false;
  }
};

// Per-op runtime state shared by every call: the slots each device has, the
// per-device slot override (set_default_implementation), and the cache.
class OpState {
 public:
  explicit OpState(const char* name);

  const char* name() const { return name_; }
  InstanceCache& cache() { return cache_; }

  void SetSlots(Device::Type device, const SlotTable& table);
  const SlotTable& Slots(Device::Type device) const {
    return tables_[static_cast<int>(device)];
  }

  // -1 removes the override. Throws InvalidArgument for a missing slot.
  void SetOverride(Device::Type device, int index);
  int Override(Device::Type device) const {
    return overrides_[static_cast<int>(device)].load(std::memory_order_relaxed);
  }

  // The slot a call runs: the requested one (validated), else the override,
  // else the device's default. Throws with the available slots listed.
  int ResolveSlot(Device::Type device, std::optional<int64_t> requested) const {
    const SlotTable& table = Slots(device);
    if (requested) {
      if (*requested >= 0 && *requested < kMaxImplementations &&
          table.Has(static_cast<int>(*requested))) {
        return static_cast<int>(*requested);
      }
      ThrowBadSlot(device, *requested);
    }
    const int chosen = Override(device);
    if (chosen >= 0) return chosen;
    if (table.default_index < 0) ThrowNoImplementation(device);
    return table.default_index;
  }

  std::string DescribeSlots(Device::Type device) const;

  // The index of the slot named `name` (its kImplementationName) on
  // `device`; InvalidArgument listing the slots when there is none.
  int SlotNamed(Device::Type device, std::string_view name) const;

  // Testing hook (polyops._C._refuse_implementations): the constructor of
  // every slot in `mask` (bit i = slot i) on `device` is treated as raising
  // NotImplemented, so tests can exercise the automatic fallback (see
  // Operator<Key>::Get) on devices whose slots all accept the arguments.
  // 0, the state at load, refuses nothing. Checked on cache misses only.
  void SetRefusedForTesting(Device::Type device, uint32_t mask) {
    refused_[static_cast<int>(device)].store(mask, std::memory_order_relaxed);
  }
  bool RefusedForTesting(Device::Type device, int index) const {
    return (refused_[static_cast<int>(device)].load(
                std::memory_order_relaxed) >>
            index) &
           1u;
  }
  [[noreturn]] void ThrowRefusedForTesting(Device::Type device,
                                           int index) const;

 private:
  [[noreturn]] void ThrowBadSlot(Device::Type device, int64_t requested) const;
  [[noreturn]] void ThrowNoImplementation(Device::Type device) const;

  const char* name_;
  InstanceCache cache_;
  SlotTable tables_[Device::kNumTypes];
  std::atomic<int> overrides_[Device::kNumTypes];
  std::atomic<uint32_t> refused_[Device::kNumTypes];
};

// Every op's state, in registration order (all ops register when the Python
// module loads).
std::vector<OpState*> AllOpStates();
OpState* FindOpState(const std::string& name);

// Applies to every op's cache, and to ops registered later.
void SetCacheCapacity(int64_t capacity);
int64_t CacheCapacity();

}  // namespace polyops

#endif  // POLYOPS_CORE_OP_STATE_H_
