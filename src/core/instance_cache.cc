#include "core/instance_cache.h"

#include <algorithm>
#include <utility>

namespace polyops {

InstanceCache::EntryList::iterator InstanceCache::Locate(const CacheKey& key,
                                                         uint64_t hash) {
  auto [first, last] = index_.equal_range(hash);
  const size_t bytes = sizeof(int64_t) * static_cast<size_t>(key.size());
  for (auto it = first; it != last; ++it) {
    const Entry& entry = *it->second;
    if (entry.words.size() == static_cast<size_t>(key.size()) &&
        std::memcmp(entry.words.data(), key.data(), bytes) == 0) {
      return it->second;
    }
  }
  return lru_.end();
}

std::shared_ptr<OperatorBase> InstanceCache::Find(const CacheKey& key,
                                                  uint64_t hash) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = Locate(key, hash);
  if (it == lru_.end()) {
    ++misses_;
    return nullptr;
  }
  ++hits_;
  lru_.splice(lru_.begin(), lru_, it);
  return it->op;
}

std::shared_ptr<OperatorBase> InstanceCache::Insert(
    const CacheKey& key, uint64_t hash, std::shared_ptr<OperatorBase> op) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = Locate(key, hash);
  if (it != lru_.end()) return it->op;
  lru_.push_front(
      Entry{hash, std::vector<int64_t>(key.data(), key.data() + key.size()),
            std::move(op)});
  index_.emplace(hash, lru_.begin());
  EvictOverflow();
  return lru_.front().op;
}

void InstanceCache::EvictOverflow() {
  while (static_cast<int64_t>(lru_.size()) > capacity_) {
    auto victim = std::prev(lru_.end());
    auto [first, last] = index_.equal_range(victim->hash);
    for (auto it = first; it != last; ++it) {
      if (it->second == victim) {
        index_.erase(it);
        break;
      }
    }
    lru_.erase(victim);
    ++evictions_;
  }
}

void InstanceCache::SetCapacity(int64_t capacity) {
  std::lock_guard<std::mutex> lock(mutex_);
  capacity_ = capacity;
  EvictOverflow();
}

void InstanceCache::Clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  index_.clear();
  lru_.clear();
  hits_ = misses_ = evictions_ = 0;
}

CacheInfo InstanceCache::Info() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return CacheInfo{hits_, misses_, evictions_,
                   static_cast<int64_t>(lru_.size()), capacity_};
}

}  // namespace polyops
