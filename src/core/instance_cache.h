#ifndef POLYOPS_CORE_INSTANCE_CACHE_H_
#define POLYOPS_CORE_INSTANCE_CACHE_H_

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/cache_key.h"

namespace polyops {

// Every base class derives from this so one cache type holds them all.
class OperatorBase {
 public:
  virtual ~OperatorBase() = default;
};

struct CacheInfo {
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t evictions = 0;
  int64_t size = 0;
  int64_t capacity = 0;
};

// A bounded LRU map from CacheKey to a constructed instance, one per op.
// Thread safe. A hit hashes the key, compares words and moves one list node:
// no heap allocation. Instances are shared_ptr so that an instance evicted
// while another thread still runs it stays alive until that call returns.
class InstanceCache {
 public:
  static constexpr int64_t kDefaultCapacity = 256;

  explicit InstanceCache(int64_t capacity = kDefaultCapacity)
      : capacity_(capacity) {}

  std::shared_ptr<OperatorBase> Find(const CacheKey& key, uint64_t hash);

  // Inserts unless another thread inserted the same key first; returns the
  // instance that is in the cache afterwards.
  std::shared_ptr<OperatorBase> Insert(const CacheKey& key, uint64_t hash,
                                       std::shared_ptr<OperatorBase> op);

  void SetCapacity(int64_t capacity);
  void Clear();
  CacheInfo Info() const;

 private:
  struct Entry {
    uint64_t hash;
    std::vector<int64_t> words;
    std::shared_ptr<OperatorBase> op;
  };
  using EntryList = std::list<Entry>;

  EntryList::iterator Locate(const CacheKey& key, uint64_t hash);
  void EvictOverflow();  // caller holds mutex_

  mutable std::mutex mutex_;
  EntryList lru_;  // front: most recently used
  std::unordered_multimap<uint64_t, EntryList::iterator> index_;
  int64_t capacity_;
  int64_t hits_ = 0;
  int64_t misses_ = 0;
  int64_t evictions_ = 0;
};

}  // namespace polyops

#endif  // POLYOPS_CORE_INSTANCE_CACHE_H_
