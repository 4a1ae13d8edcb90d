#ifndef POLYOPS_CPU_RESHAPE_AND_CACHE_OMP_H_
#define POLYOPS_CPU_RESHAPE_AND_CACHE_OMP_H_

#include <cstdint>
#include <cstring>
#include <vector>

#include "base/reshape_and_cache.h"
#include "core/operator.h"
#include "cpu/runtime/parallel.h"

namespace polyops {

// Slot 0: slots are read once into a local copy and checked there, in one
// serial pass (nothing is written when one is out of range, and an error
// cannot leave an OpenMP region); the copy loop uses only that copy, so a
// slot changed by another thread meanwhile cannot turn into an
// out-of-bounds write. Tokens are copied as bytes, one memcpy per head (per
// token when its heads are packed), over OpenMP threads for large calls.
template <>
class Operator<ReshapeAndCache, Device::Type::kCpu, 0>
    : public ReshapeAndCache {
 public:
  static constexpr const char* kImplementationName = "omp";
  using ReshapeAndCache::ReshapeAndCache;

  void operator()(const Handle&, const Args& args) const override {
    if (slot_dtype_ == DataType::kInt64) {
      Run(args.slot_mapping.data_as<const int64_t>(), args.key, args.value,
          args.key_cache, args.value_cache);
    } else {
      Run(args.slot_mapping.data_as<const int32_t>(), args.key, args.value,
          args.key_cache, args.value_cache);
    }
  }

 private:
  template <typename S>
  void Run(const S* slots, const Tensor& key, const Tensor& value,
           const Tensor& key_cache, const Tensor& value_cache) const {
    std::vector<int64_t> checked(tokens_);
    for (int64_t t = 0; t < tokens_; ++t) {
      const int64_t slot = cpu::ReadOnce(slots + t * slot_stride_);
      checked[t] = slot;
      POLYOPS_CHECK(slot < num_slots_,
                    "polyops.reshape_and_cache: "
                    "slot_mapping[",
                    t, "] = ", slot,
                    " is out of range: the caches hold num_blocks * "
                    "block_size = ",
                    num_slots_, " slots");
    }
    const int64_t width = element_size_;
    const bool parallel = tokens_ * heads_ * head_size_ >= cpu::kParallelGrain;
    char* key_base = static_cast<char*>(key_cache.data());
    char* value_base = static_cast<char*>(value_cache.data());
    const char* key_data = static_cast<const char*>(key.data());
    const char* value_data = static_cast<const char*>(value.data());
    cpu::ParallelFor(tokens_, parallel, [&](int64_t t) {
      const int64_t slot = checked[t];
      if (slot < 0) return;
      const int64_t block = slot / block_size_;
      const int64_t offset = slot % block_size_;
      CopyToken(key_data + t * key_strides_[0] * width, key_strides_[1],
                key_base + (block * key_cache_strides_[0] +
                            offset * key_cache_strides_[1]) *
                               width,
                key_cache_strides_[2]);
      CopyToken(value_data + t * value_strides_[0] * width, value_strides_[1],
                value_base + (block * value_cache_strides_[0] +
                              offset * value_cache_strides_[1]) *
                                 width,
                value_cache_strides_[2]);
    });
  }

  // One token's heads; a single copy when both sides pack them (NHD caches).
  void CopyToken(const char* src, int64_t src_head_stride, char* dst,
                 int64_t dst_head_stride) const {
    const int64_t width = element_size_;
    const int64_t head_bytes = head_size_ * width;
    if (heads_ == 1 ||
        (src_head_stride == head_size_ && dst_head_stride == head_size_)) {
      std::memcpy(dst, src, static_cast<size_t>(heads_ * head_bytes));
      return;
    }
    for (int64_t h = 0; h < heads_; ++h) {
      std::memcpy(dst + h * dst_head_stride * width,
                  src + h * src_head_stride * width,
                  static_cast<size_t>(head_bytes));
    }
  }
};

}  // namespace polyops

#endif  // POLYOPS_CPU_RESHAPE_AND_CACHE_OMP_H_
