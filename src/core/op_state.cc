#include "core/op_state.h"

#include <algorithm>
#include <mutex>

#include "core/error.h"

namespace polyops {
namespace {

struct Registry {
  std::mutex mutex;
  std::vector<OpState*> states;
  int64_t capacity = InstanceCache::kDefaultCapacity;
};

Registry& GetRegistry() {
  static Registry* registry = new Registry;  // outlives every OpState user
  return *registry;
}

}  // namespace

OpState::OpState(const char* name) : name_(name) {
  for (auto& value : overrides_) value.store(-1);
  for (auto& value : refused_) value.store(0);
  Registry& registry = GetRegistry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  cache_.SetCapacity(registry.capacity);
  registry.states.push_back(this);
}

void OpState::SetSlots(Device::Type device, const SlotTable& table) {
  tables_[static_cast<int>(device)] = table;
}

std::string OpState::DescribeSlots(Device::Type device) const {
  // By index, the number a caller passes; the table holds the try order.
  SlotTable table = Slots(device);
  if (table.count == 0) return "none";
  std::sort(
      table.slots, table.slots + table.count,
      [](const SlotInfo& a, const SlotInfo& b) { return a.index < b.index; });
  std::string text;
  for (int i = 0; i < table.count; ++i) {
    if (i) text += ", ";
    text +=
        std::to_string(table.slots[i].index) + " (" + table.slots[i].name + ")";
  }
  return text;
}

void OpState::SetOverride(Device::Type device, int index) {
  if (index >= 0 && !Slots(device).Has(index)) ThrowBadSlot(device, index);
  overrides_[static_cast<int>(device)].store(index, std::memory_order_relaxed);
}

void OpState::ThrowBadSlot(Device::Type device, int64_t requested) const {
  throw InvalidArgument(
      detail::Concat("polyops.", name_, ": implementation_index=", requested,
                     " does not exist on device '", DeviceTypeName(device),
                     "'; available: ", DescribeSlots(device)));
}

int OpState::SlotNamed(Device::Type device, std::string_view name) const {
  const SlotTable& table = Slots(device);
  if (table.count == 0) ThrowNoImplementation(device);
  for (int i = 0; i < table.count; ++i) {
    if (name == table.slots[i].name) return table.slots[i].index;
  }
  throw InvalidArgument(
      detail::Concat("polyops.", name_, ": implementation='", name,
                     "' does not exist on device '", DeviceTypeName(device),
                     "'; available: ", DescribeSlots(device)));
}

void OpState::ThrowRefusedForTesting(Device::Type device, int index) const {
  throw NotImplemented(detail::Concat("polyops.", name_,
                                      ": implementation_index=", index,
                                      " on device '", DeviceTypeName(device),
                                      "' refuses these arguments (testing hook "
                                      "polyops._C._refuse_implementations)"));
}

void OpState::ThrowNoImplementation(Device::Type device) const {
  throw NotImplemented(detail::Concat(
      "polyops.", name_, " is not supported on device '",
      DeviceTypeName(device),
      "' because this build has no implementation "
      "of it there (see polyops.devices() and polyops.implementations())"));
}

std::vector<OpState*> AllOpStates() {
  Registry& registry = GetRegistry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  return registry.states;
}

OpState* FindOpState(const std::string& name) {
  for (OpState* state : AllOpStates()) {
    if (name == state->name()) return state;
  }
  return nullptr;
}

void SetCacheCapacity(int64_t capacity) {
  POLYOPS_CHECK(capacity >= 1,
                "polyops.set_cache_capacity: n must be >= 1, got ", capacity);
  Registry& registry = GetRegistry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  registry.capacity = capacity;
  for (OpState* state : registry.states) state->cache().SetCapacity(capacity);
}

int64_t CacheCapacity() {
  Registry& registry = GetRegistry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  return registry.capacity;
}

}  // namespace polyops
