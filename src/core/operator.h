// Operator<Key, Device, Index>: one implementation of op `Key` on one device
// in slot `Index`. Backends specialize it, one file per slot; a slot is
// compiled in when its specialization derives from `Key` (std::is_base_of
// over slots 0..kMaxImplementations-1, on an empty primary template), and
// src/slots.txt gives the order the slots are tried in. Operator<Key> (device
// kAny) is the front every call goes through: slot policy, instance cache,
// construction on a miss.
#ifndef POLYOPS_CORE_OPERATOR_H_
#define POLYOPS_CORE_OPERATOR_H_

#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>

#include "core/cache_key.h"
#include "core/device.h"
#include "core/error.h"
#include "core/op_state.h"

namespace polyops {

template <typename Key, Device::Type kDevice = Device::Type::kAny,
          int kIndex = -1>
class Operator {};  // An empty slot.

template <typename Key, Device::Type kDevice, int kIndex>
inline constexpr bool kHasImplementation =
    std::is_base_of_v<Key, Operator<Key, kDevice, kIndex>>;

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

// The slots compiled in for (Key, kDevice), with their names, in `order`:
// the try order of src/slots.txt (generated, checked against the slot
// files), so the first is the default. A listed slot that is not compiled in
// (e.g. FlashInfer's without POLYOPS_WITH_FLASHINFER) is left out.
template <typename Key, Device::Type kDevice>
SlotTable CollectSlots(std::initializer_list<int> order) {
  SlotTable table;
  for (const int index : order) {
    detail::ForEachSlot([&](auto slot) {
      constexpr int kSlot = decltype(slot)::value;
      if constexpr (kHasImplementation<Key, kDevice, kSlot>) {
        if (index == kSlot) {
          table.slots[table.count++] = {
              kSlot, Operator<Key, kDevice, kSlot>::kImplementationName};
        }
      }
    });
  }
  table.default_index = table.count > 0 ? table.slots[0].index : -1;
  return table;
}

// Constructs slot `slot` (already validated against CollectSlots) from the
// op's arguments in constructor order, as one `Key::Args`.
template <typename Key, Device::Type kDevice, typename... Params>
std::shared_ptr<Key> MakeImplementation(int slot, const Params&... params) {
  std::shared_ptr<Key> made;
  detail::ForEachSlot([&](auto index) {
    constexpr int kSlot = decltype(index)::value;
    if constexpr (kHasImplementation<Key, kDevice, kSlot>) {
      if (slot == kSlot) {
        made = std::make_shared<Operator<Key, kDevice, kSlot>>(
            typename Key::Args{params...});
      }
    }
  });
  return made;
}

// What the cache holds, under the key of a slot chosen automatically, when
// that slot's constructor refused the arguments (NotImplemented) and the
// selection fell back to another slot: the instance of the slot that
// accepted, and the refusal. A later automatic call hits it and runs the
// fallback; an explicit implementation_index for the refusing slot hits it
// and raises the refusal, as constructing that slot again would.
class SlotFallback final : public OperatorBase {
 public:
  SlotFallback(std::shared_ptr<OperatorBase> instance, std::string refusal)
      : instance_(std::move(instance)), refusal_(std::move(refusal)) {}

  const std::shared_ptr<OperatorBase>& instance() const { return instance_; }
  const std::string& refusal() const { return refusal_; }

 private:
  std::shared_ptr<OperatorBase> instance_;
  std::string refusal_;
};

template <typename Key>
class Operator<Key, Device::Type::kAny, -1> {
 public:
  static OpState& State() {
    static OpState* state = new OpState(Key::kName);  // lives to exit
    return *state;
  }

  // Returns the cached instance for these arguments, constructing it with
  // `make(device_type, slot)` on a miss. The hit path allocates nothing.
  //
  // Fallback: without an implementation_index the call starts at the
  // device's default slot (or the set_default_implementation override); if
  // its constructor raises NotImplemented (the arguments are outside what
  // that slot supports), the other slots are tried in table order and the
  // first that constructs runs. The choice is cached under the starting
  // slot's key (SlotFallback), so later calls with the same key hit it
  // without constructing again. An explicit implementation_index never
  // falls back. Other errors (ValueError: the arguments are wrong for every
  // slot) propagate at once.
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
      // A type_info comparison, no allocation; true only after a fallback.
      if (typeid(*hit) == typeid(SlotFallback)) {
        const auto& fallback = static_cast<const SlotFallback&>(*hit);
        if (requested_slot) throw NotImplemented(fallback.refusal());
        return std::static_pointer_cast<Key>(fallback.instance());
      }
      return std::static_pointer_cast<Key>(std::move(hit));
    }
    auto construct = [&](int index) -> std::shared_ptr<Key> {
      if (state.RefusedForTesting(device.type, index)) {
        state.ThrowRefusedForTesting(device.type, index);
      }
      return make(device.type, index);
    };
    if (requested_slot) {
      return std::static_pointer_cast<Key>(
          cache.Insert(key, hash, construct(slot)));
    }
    std::string refusal;
    try {
      return std::static_pointer_cast<Key>(
          cache.Insert(key, hash, construct(slot)));
    } catch (const NotImplemented& error) {
      refusal = error.what();
    }
    // The other slots' refusals, for the final error: only those that say
    // something else (slots sharing a dtype check refuse alike).
    std::string others;
    bool other_slots = false;
    const SlotTable& table = state.Slots(device.type);
    for (int i = 0; i < table.count; ++i) {
      const int index = table.slots[i].index;
      if (index == slot) continue;
      std::shared_ptr<Key> made;
      try {
        made = construct(index);
      } catch (const NotImplemented& error) {
        other_slots = true;
        if (refusal != error.what()) {
          others += detail::Concat("; ", index, " (", table.slots[i].name,
                                   "): ", error.what());
        }
        continue;
      }
      std::shared_ptr<OperatorBase> cached = cache.Insert(
          key, hash, std::make_shared<SlotFallback>(made, refusal));
      // Another thread may have cached this key first: run what it cached.
      if (typeid(*cached) == typeid(SlotFallback)) {
        return std::static_pointer_cast<Key>(
            static_cast<const SlotFallback&>(*cached).instance());
      }
      return std::static_pointer_cast<Key>(std::move(cached));
    }
    if (!other_slots) throw NotImplemented(refusal);
    throw NotImplemented(detail::Concat(
        refusal, " (no other implementation on device '",
        DeviceTypeName(device.type), "' accepts them either", others, ")"));
  }
};

}  // namespace polyops

#endif  // POLYOPS_CORE_OPERATOR_H_
