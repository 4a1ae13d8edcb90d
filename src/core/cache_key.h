#ifndef POLYOPS_CORE_CACHE_KEY_H_
#define POLYOPS_CORE_CACHE_KEY_H_

#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "core/data_type.h"
#include "core/tensor.h"

namespace polyops {

// The identity of a cached operator instance, as a flat run of 64-bit words:
// every tensor's device, dtype, shape and strides (never its data pointer),
// every scalar by value (doubles by their bits, so 1e-6 and 1e-5 never
// collide), and the implementation slot. Built on every call, so the words
// live inline; only keys longer than kInlineWords (e.g. `cat` of many tensors)
// spill to the heap.
class CacheKey {
 public:
  static constexpr int kInlineWords = 192;

  void Push(int64_t word) {
    if (size_ < kInlineWords) {
      inline_[size_] = word;
    } else {
      if (size_ == kInlineWords) spill_.assign(inline_, inline_ + kInlineWords);
      spill_.push_back(word);
    }
    ++size_;
  }

  const int64_t* data() const {
    return size_ <= kInlineWords ? inline_ : spill_.data();
  }
  int size() const { return size_; }

  // A 64-bit mix over the words (splitmix64 finalizer per word).
  uint64_t Hash() const {
    uint64_t hash = 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(size_);
    const int64_t* words = data();
    for (int i = 0; i < size_; ++i) {
      uint64_t z =
          hash + static_cast<uint64_t>(words[i]) + 0x9e3779b97f4a7c15ull;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      hash = z ^ (z >> 31);
    }
    return hash;
  }

 private:
  int64_t inline_[kInlineWords];
  int size_ = 0;
  std::vector<int64_t> spill_;
};

inline void AppendKey(CacheKey& key, const Tensor& tensor) {
  key.Push((static_cast<int64_t>(tensor.device().type) << 40) ^
           (static_cast<int64_t>(tensor.device().index) << 8) ^
           static_cast<int64_t>(tensor.dtype()));
  key.Push(tensor.ndim());
  for (int i = 0; i < tensor.ndim(); ++i) key.Push(tensor.shape()[i]);
  for (int i = 0; i < tensor.ndim(); ++i) key.Push(tensor.strides()[i]);
}

inline void AppendKey(CacheKey& key, double value) {
  int64_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  key.Push(bits);
}

inline void AppendKey(CacheKey& key, int64_t value) { key.Push(value); }
inline void AppendKey(CacheKey& key, bool value) { key.Push(value ? 1 : 0); }
inline void AppendKey(CacheKey& key, DataType value) {
  key.Push(static_cast<int64_t>(value));
}

template <typename T>
void AppendKey(CacheKey& key, const std::optional<T>& value) {
  key.Push(value.has_value() ? 1 : 0);
  if (value) AppendKey(key, *value);
}

// An optional argument keyed by presence only: the op's instance must not
// depend on its value, which the kernel reads at call time (an op lists such
// arguments in kKeyedByPresence). Keying topk_topp_sampling's seed by value
// would miss the cache on every new seed.
template <typename T>
struct KeyedByPresence {
  const std::optional<T>& value;
};

template <typename T>
void AppendKey(CacheKey& key, KeyedByPresence<T> argument) {
  key.Push(argument.value.has_value() ? 1 : 0);
}

template <typename T>
void AppendKey(CacheKey& key, const std::vector<T>& values) {
  key.Push(static_cast<int64_t>(values.size()));
  for (const T& value : values) AppendKey(key, value);
}

}  // namespace polyops

#endif  // POLYOPS_CORE_CACHE_KEY_H_
