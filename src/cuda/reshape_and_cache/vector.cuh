#ifndef POLYOPS_CUDA_RESHAPE_AND_CACHE_VECTOR_CUH_
#define POLYOPS_CUDA_RESHAPE_AND_CACHE_VECTOR_CUH_

#include <algorithm>
#include <cstdint>

#include "base/reshape_and_cache.h"
#include "core/operator.h"
#include "cuda/kernels/rows/rows.cuh"
#include "cuda/runtime/common.cuh"

namespace polyops {
namespace cuda {

// The copy's geometry in units of the copy (16 bytes, or one element).
struct CacheCopy {
  int64_t tokens = 0;
  int64_t heads = 0;
  int64_t head_units = 0;  // units per head
  int64_t block_size = 1;
  int64_t num_slots = 0;
  int64_t key_strides[2] = {};          // token, head
  int64_t value_strides[2] = {};        // token, head
  int64_t key_cache_strides[3] = {};    // block, token in block, head
  int64_t value_cache_strides[3] = {};  // block, token in block, head
  const void* slots = nullptr;
  bool slots_int32 = false;
  int64_t slot_stride = 1;
};

// One block per token (tokens strided by gridDim.x); its threads copy the
// key and value heads unit by unit into the cache slot, addressed through
// the caches' block / in-block / head strides (NHD or HND views of one
// allocation alike). A negative slot is padding and skipped. A slot >=
// num_slots cannot be reported without a copy to the host (the CPU slot
// raises ValueError): the token is skipped, so nothing is written out of
// bounds.
template <typename U>
__global__ void __launch_bounds__(512)
    ReshapeAndCacheKernel(const U* key, const U* value, U* key_cache,
                          U* value_cache, CacheCopy c) {
  const int64_t units = c.heads * c.head_units;
  for (int64_t t = blockIdx.x; t < c.tokens; t += gridDim.x) {
    const int64_t at = t * c.slot_stride;
    const int64_t slot =
        c.slots_int32
            ? static_cast<int64_t>(static_cast<const int32_t*>(c.slots)[at])
            : static_cast<const int64_t*>(c.slots)[at];
    if (slot < 0 || slot >= c.num_slots) continue;
    const int64_t block = slot / c.block_size;
    const int64_t offset = slot - block * c.block_size;
    U* k_dst = key_cache + block * c.key_cache_strides[0] +
               offset * c.key_cache_strides[1];
    U* v_dst = value_cache + block * c.value_cache_strides[0] +
               offset * c.value_cache_strides[1];
    const U* k_src = key + t * c.key_strides[0];
    const U* v_src = value + t * c.value_strides[0];
    for (int64_t item = threadIdx.x; item < units; item += blockDim.x) {
      const int64_t h = item / c.head_units;
      const int64_t j = item - h * c.head_units;
      k_dst[h * c.key_cache_strides[2] + j] = k_src[h * c.key_strides[1] + j];
      v_dst[h * c.value_cache_strides[2] + j] =
          v_src[h * c.value_strides[1] + j];
    }
  }
}

}  // namespace cuda

// Slot 0: one block per token, 16-byte copies when the head size, every
// stride and the pointers allow, element copies otherwise; no dtype
// dispatch (a copy of bits). Compiled, never executed on a GPU yet.
template <>
class Operator<ReshapeAndCache, Device::Type::kCuda, 0>
    : public ReshapeAndCache {
 public:
  static constexpr const char* kImplementationName = "vector";

  explicit Operator(const Args& args) : ReshapeAndCache(args) {
    const int64_t width = 16 / element_size_;  // elements per 16 bytes
    packable_ = head_size_ % width == 0;
    for (int64_t stride :
         {key_strides_[0], key_strides_[1], value_strides_[0],
          value_strides_[1], key_cache_strides_[0], key_cache_strides_[1],
          key_cache_strides_[2], value_cache_strides_[0],
          value_cache_strides_[1], value_cache_strides_[2]}) {
      packable_ = packable_ && stride % width == 0;
    }
    packed_ = Geometry(packable_ ? width : 1);
    elements_ = Geometry(1);
    const int64_t units =
        heads_ * (packable_ ? head_size_ / width : head_size_);
    threads_ = static_cast<int>(
        std::min<int64_t>((std::max<int64_t>(units, 1) + 31) / 32 * 32, 512));
  }

  void operator()(const Handle& handle, const Args& args) const override {
    if (tokens_ == 0 || heads_ * head_size_ == 0) return;
    const bool packed = packable_ && cuda::Aligned16(args.key.data()) &&
                        cuda::Aligned16(args.value.data()) &&
                        cuda::Aligned16(args.key_cache.data()) &&
                        cuda::Aligned16(args.value_cache.data());
    cuda::CacheCopy copy = packed ? packed_ : elements_;
    copy.slots = args.slot_mapping.data();
    const cudaStream_t stream = cuda::StreamOf(handle);
    const unsigned blocks =
        static_cast<unsigned>(std::min<int64_t>(tokens_, 0x7fffffff));
    if (packed) {
      Launch<uint4>(args.key, args.value, args.key_cache, args.value_cache,
                    copy, blocks, stream);
    } else if (element_size_ == 2) {
      Launch<uint16_t>(args.key, args.value, args.key_cache, args.value_cache,
                       copy, blocks, stream);
    } else {
      Launch<uint32_t>(args.key, args.value, args.key_cache, args.value_cache,
                       copy, blocks, stream);
    }
  }

 private:
  // The geometry in units of `width` elements.
  cuda::CacheCopy Geometry(int64_t width) const {
    cuda::CacheCopy c;
    c.tokens = tokens_;
    c.heads = heads_;
    c.head_units = head_size_ / width;
    c.block_size = block_size_;
    c.num_slots = num_slots_;
    for (int d = 0; d < 2; ++d) {
      c.key_strides[d] = key_strides_[d] / width;
      c.value_strides[d] = value_strides_[d] / width;
    }
    for (int d = 0; d < 3; ++d) {
      c.key_cache_strides[d] = key_cache_strides_[d] / width;
      c.value_cache_strides[d] = value_cache_strides_[d] / width;
    }
    c.slots_int32 = slot_dtype_ == DataType::kInt32;
    c.slot_stride = slot_stride_;
    return c;
  }

  template <typename U>
  void Launch(const Tensor& key, const Tensor& value, const Tensor& key_cache,
              const Tensor& value_cache, const cuda::CacheCopy& copy,
              unsigned blocks, cudaStream_t stream) const {
    cuda::ReshapeAndCacheKernel<U><<<blocks, threads_, 0, stream>>>(
        static_cast<const U*>(key.data()), static_cast<const U*>(value.data()),
        static_cast<U*>(key_cache.data()), static_cast<U*>(value_cache.data()),
        copy);
    cuda::CheckLaunch(kName);
  }

  bool packable_ = false;
  cuda::CacheCopy packed_;    // in 16-byte units when packable_
  cuda::CacheCopy elements_;  // in elements
  int threads_ = 32;
};

}  // namespace polyops

#endif  // POLYOPS_CUDA_RESHAPE_AND_CACHE_VECTOR_CUH_
