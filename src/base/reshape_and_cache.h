#ifndef POLYOPS_BASE_RESHAPE_AND_CACHE_H_
#define POLYOPS_BASE_RESHAPE_AND_CACHE_H_

#include <cstdint>

#include "core/checks.h"
#include "core/handle.h"
#include "core/instance_cache.h"

namespace polyops {

// reshape_and_cache(key, value, key_cache, value_cache, slot_mapping) -> None
//
// vLLM's paged KV-cache write: token t's key and value heads go to
// key_cache[s // block_size, s % block_size] and
// value_cache[s // block_size, s % block_size] for s = slot_mapping[t];
// a negative slot skips the token (padding). In place on the caches.
// Two tokens with the same slot: which one lands is unspecified.
//   key, value:   [T, Hkv, D], float16, bfloat16 or float32, same shape;
//                 D contiguous, token and head strides free.
//   key_cache, value_cache: [num_blocks, block_size, Hkv, D], key's dtype;
//                 any strides with D contiguous: vLLM allocates K and V as
//                 views into one buffer ([num_blocks, 2, block_size, Hkv,
//                 D] sliced on dim 1) and may store heads outside tokens
//                 (HND, a permuted view).
//   slot_mapping: [T], int32 or int64 (same result), any stride. A slot
//                 >= num_blocks * block_size is a ValueError naming the
//                 token: the CPU kernel reads each slot once into a copy,
//                 checks the copies before writing anything and writes
//                 through the copies only, so another thread changing
//                 slot_mapping mid-call cannot cause an out-of-bounds write.
//                 (An accelerator backend cannot check without copying
//                 slot_mapping to the host.)
class ReshapeAndCache : public OperatorBase {
 public:
  static constexpr const char* kName = "reshape_and_cache";
  static constexpr int kNumPositional = 5;
  // Written in place: the torch.library schema declares them Tensor(a!).
  static constexpr const char* kMutates[] = {"key_cache", "value_cache"};

  // The call's arguments, in the constructor's order. Slots take them as
  // one struct: a new parameter touches this header and the slots that
  // read it.
  struct Args {
    const Tensor& key;
    const Tensor& value;
    const Tensor& key_cache;
    const Tensor& value_cache;
    const Tensor& slot_mapping;
  };

  ReshapeAndCache(const Tensor& key, const Tensor& value,
                  const Tensor& key_cache, const Tensor& value_cache,
                  const Tensor& slot_mapping) {
    POLYOPS_CHECK(key.ndim() == 3,
                  "polyops.reshape_and_cache: key must be [T, Hkv, D], got "
                  "shape ",
                  key.ShapeString());
    CheckFloatDtype(kName, "key", key);
    CheckSameDtype(kName, "value", value, "key", key);
    CheckSameShape(kName, "value", value, "key", key);
    CheckLastDimContiguous(kName, "key", key);
    CheckLastDimContiguous(kName, "value", value);
    POLYOPS_CHECK(key_cache.ndim() == 4 && key_cache.size(2) == key.size(1) &&
                      key_cache.size(3) == key.size(2),
                  "polyops.reshape_and_cache: key_cache must be [num_blocks, "
                  "block_size, ",
                  key.size(1), ", ", key.size(2), "], got shape ",
                  key_cache.ShapeString());
    CheckSameDtype(kName, "key_cache", key_cache, "key", key);
    CheckSameDtype(kName, "value_cache", value_cache, "key", key);
    CheckSameShape(kName, "value_cache", value_cache, "key_cache", key_cache);
    CheckLastDimContiguous(kName, "key_cache", key_cache);
    CheckLastDimContiguous(kName, "value_cache", value_cache);
    POLYOPS_CHECK(
        slot_mapping.ndim() == 1 && slot_mapping.size(0) == key.size(0),
        "polyops.reshape_and_cache: slot_mapping must have shape [",
        key.size(0), "] (key's tokens), got ", slot_mapping.ShapeString());
    POLYOPS_CHECK(slot_mapping.dtype() == DataType::kInt64 ||
                      slot_mapping.dtype() == DataType::kInt32,
                  "polyops.reshape_and_cache: slot_mapping must be int64 or "
                  "int32, got ",
                  DataTypeName(slot_mapping.dtype()));
    tokens_ = key.size(0);
    heads_ = key.size(1);
    head_size_ = key.size(2);
    block_size_ = key_cache.size(1);
    num_slots_ = key_cache.size(0) * block_size_;
    for (int d = 0; d < 3; ++d) {
      key_cache_strides_[d] = key_cache.stride(d);
      value_cache_strides_[d] = value_cache.stride(d);
    }
    key_strides_[0] = key.stride(0);
    key_strides_[1] = key.stride(1);
    value_strides_[0] = value.stride(0);
    value_strides_[1] = value.stride(1);
    slot_stride_ = slot_mapping.stride(0);
    slot_dtype_ = slot_mapping.dtype();
    element_size_ = key.element_size();
  }

  explicit ReshapeAndCache(const Args& args)
      : ReshapeAndCache(args.key, args.value, args.key_cache, args.value_cache,
                        args.slot_mapping) {}

  virtual void operator()(const Handle& handle, const Args& args) const = 0;

 protected:
  int64_t tokens_ = 0;
  int64_t heads_ = 0;
  int64_t head_size_ = 0;
  int64_t block_size_ = 1;
  // num_blocks * block_size: slot s is token s % block_size of block
  // s / block_size.
  int64_t num_slots_ = 0;
  int64_t key_cache_strides_[3] = {};    // block, token in block, head
  int64_t value_cache_strides_[3] = {};  // block, token in block, head
  int64_t key_strides_[2] = {};          // token, head
  int64_t value_strides_[2] = {};        // token, head
  int64_t slot_stride_ = 1;
  DataType slot_dtype_ = DataType::kInt64;
  int element_size_ = 4;
};

}  // namespace polyops

#endif  // POLYOPS_BASE_RESHAPE_AND_CACHE_H_
