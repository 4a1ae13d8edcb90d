// Operator<Key, Device, Index>: one implementation of op `Key` on one device
// in slot `Index`. Backends specialize it; nothing registers a slot by hand:
// a slot exists when its specialization derives from `Key` (SFINAE-free
// std::is_base_of over slots 0..kMaxImplementations-1, on an empty primary
// template). Operator<Key> (device kAny) is the front every call goes
// through: slot policy, instance cache, construction on a miss.
#ifndef POLYOPS_CORE_OPERATOR_H_
#define POLYOPS_CORE_OPERATOR_H_

#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include "core/cache_key.h"
#include "core/device.h"
#include "core/op_state.h"

namespace polyops {

template <typename Key, Device::Type kDevice = Device::Type::kAny,
          int kIndex = -1>
class Operator {};  // An empty slot.

template <typename Key, Device::Type kDevice, int kIndex>
inline constexpr bool kHasImplementation =
    std::is_base_of_v<Key, Operator<Key, kDevice, kIndex>>;

// A backend may name its default slot for an op; otherwise the lowest wins.
template <typename Key, Device::Type kDevice>
struct DefaultImplementation {
  static constexpr int kIndex = -1;
};

namespace detail {

template <typename Fn, int... kIndices>
void ForEachSlot(Fn&& fn, std::integer_sequence<int, kIndices...>) {
  (fn(std::integral_constant<int, kIndices>{}), ...);
}

template <typename Fn>
void ForEachSlot(Fn&& fn) {
  ForEachSlot(std::forward<Fn>(fn),
              std::make_integer_sequence<int, kMaxImplementations>{});
}

}  // namespace detail

// The slots compiled in for (Key, kDevice), with their names.
template <typename Key, Device::Type kDevice>
SlotTable CollectSlots() {
  SlotTable table;
  detail::ForEachSlot([&](auto index) {
    constexpr int kSlot = decltype(index)::value;
    if constexpr (kHasImplementation<Key, kDevice, kSlot>) {
      table.slots[table.count++] = {
          kSlot, Operator<Key, kDevice, kSlot>::kImplementationName};
    }
  });
  constexpr int kDefault = DefaultImplementation<Key, kDevice>::kIndex;
  table.default_index = kDefault >= 0     ? kDefault
                        : table.count > 0 ? table.slots[0].index
                                          : -1;
  return table;
}

// Constructs slot `slot` (already validated against CollectSlots).
template <typename Key, Device::Type kDevice, typename... Args>
std::shared_ptr<Key> MakeImplementation(int slot, const Args&... args) {
  std::shared_ptr<Key> made;
  detail::ForEachSlot([&](auto index) {
    constexpr int kSlot = decltype(index)::value;
    if constexpr (kHasImplementation<Key, kDevice, kSlot>) {
      if (slot == kSlot) {
        made = std::make_shared<Operator<Key, kDevice, kSlot>>(args...);
      }
    }
  });
  return made;
}

template <typename Key>
class Operator<Key, Device::Type::kAny, -1> {
 public:
  static OpState& State() {
    static OpState* state = new OpState(Key::kName);  // lives to exit
    return *state;
  }

  // Returns the cached instance for these arguments, constructing it with
  // `make(device_type, slot)` on a miss. The hit path allocates nothing.
  template <typename MakeFn, typename... Args>
  static std::shared_ptr<Key> Get(Device device,
                                  std::optional<int64_t> requested_slot,
                                  MakeFn&& make, const Args&... args) {
    OpState& state = State();
    const int slot = state.ResolveSlot(device.type, requested_slot);
    CacheKey key;
    key.Push(slot);
    (AppendKey(key, args), ...);
    const uint64_t hash = key.Hash();
    InstanceCache& cache = state.cache();
    if (std::shared_ptr<OperatorBase> hit = cache.Find(key, hash)) {
      return std::static_pointer_cast<Key>(std::move(hit));
    }
    std::shared_ptr<Key> made = make(device.type, slot);
    return std::static_pointer_cast<Key>(cache.Insert(key, hash, made));
  }
};

}  // namespace polyops

#endif  // POLYOPS_CORE_OPERATOR_H_
