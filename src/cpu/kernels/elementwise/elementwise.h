// Loops over an ElementwiseLayout shared by the CPU elementwise kernels.
#ifndef POLYOPS_CPU_KERNELS_ELEMENTWISE_ELEMENTWISE_H_
#define POLYOPS_CPU_KERNELS_ELEMENTWISE_ELEMENTWISE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/elementwise_layout.h"
#include "cpu/runtime/convert.h"
#include "cpu/runtime/parallel.h"

namespace polyops::cpu {

// Elements per staged block: small enough that K float buffers stay in L1.
inline constexpr int64_t kBlock = 512;

// Integer arithmetic wraps on overflow (as torch's does) without signed
// overflow UB; floating arithmetic is plain. The unsigned type is at least
// as wide as int: 8- and 16-bit unsigned operands would be promoted to
// (signed) int, whose product can overflow.
template <typename C>
using WrapType = std::conditional_t<(sizeof(C) < sizeof(unsigned)), unsigned,
                                    std::make_unsigned_t<C>>;

template <typename C>
inline C WrappingAdd(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    using U = WrapType<C>;
    return static_cast<C>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}

template <typename C>
inline C WrappingMul(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    using U = WrapType<C>;
    return static_cast<C>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

// add's alpha (base/add.h) as compute type C; a negative integer wraps into
// an unsigned type as torch converts it (uint8: -1 -> 255).
template <typename C>
inline C AlphaAs(double alpha) {
  if constexpr (std::is_integral_v<C>) {
    return static_cast<C>(static_cast<int64_t>(alpha));
  } else {
    return static_cast<C>(alpha);
  }
}

// a + alpha * b as add computes it, on compute-typed values of storage type
// T: integers wrap; float and double as one fused multiply-add; float16/
// bfloat16 in float, where alpha * b (two 16-bit values) is exact, so the
// plain expression rounds once, as the fused form would.
template <typename T, typename C>
inline C ScaledAdd(C a, C b, C alpha) {
  if constexpr (std::is_integral_v<C>) {
    using U = WrapType<C>;
    return static_cast<C>(static_cast<U>(a) +
                          static_cast<U>(alpha) * static_cast<U>(b));
  } else if constexpr (std::is_same_v<T, C>) {
    return std::fma(alpha, b, a);
  } else {
    return a + alpha * b;
  }
}

// The reference traversal: calls fn(offsets) for every element in row-major
// order, one thread, no staging.
template <int K, typename Fn>
void ForEachElement(const ElementwiseLayout<K>& layout, Fn&& fn) {
  const int64_t inner = layout.inner();
  for (int64_t run = 0; run < layout.runs(); ++run) {
    int64_t base[K];
    layout.Offsets(run * inner, base);
    int64_t offsets[K];
    for (int64_t i = 0; i < inner; ++i) {
      for (int k = 0; k < K; ++k) {
        offsets[k] = base[k] + i * layout.strides[k][layout.ndim - 1];
      }
      fn(offsets);
    }
  }
}

// One block of MapBlocks: the `block`-th piece of up to kBlock elements.
template <typename T, int K, typename Fn>
POLYOPS_INLINE void MapBlock(const ElementwiseLayout<K>& layout,
                             void* const (&data)[K], const int64_t (&extra)[K],
                             int64_t block, int64_t blocks_per_run, Fn& fn) {
  using C = ComputeType<T>;
  const int64_t inner = layout.inner();
  const int last = layout.ndim - 1;
  const int64_t run = block / blocks_per_run;
  const int64_t begin = (block % blocks_per_run) * kBlock;
  const int64_t n = std::min(kBlock, inner - begin);
  int64_t offsets[K];
  layout.Offsets(run * inner + begin, offsets);
  C buffers[K][kBlock];
  const C* inputs[K > 1 ? K - 1 : 1];
  for (int k = 1; k < K; ++k) {
    const T* src = static_cast<const T*>(data[k]) + offsets[k] + extra[k];
    const int64_t stride = layout.strides[k][last];
    if constexpr (std::is_same_v<T, C>) {
      if (stride == 1) {
        inputs[k - 1] = src;
        continue;
      }
    }
    LoadBlock(src, stride, buffers[k], n);
    inputs[k - 1] = buffers[k];
  }
  T* dst = static_cast<T*>(data[0]) + offsets[0] + extra[0];
  const int64_t out_stride = layout.strides[0][last];
  if constexpr (std::is_same_v<T, C>) {
    if (out_stride == 1) {
      fn(dst, inputs, n);
      return;
    }
  }
  fn(buffers[0], inputs, n);
  StoreBlock(buffers[0], dst, out_stride, n);
}

// The fast traversal: splits the space into blocks of up to kBlock elements
// of one innermost run, spread over OpenMP threads when `parallel` and the
// tensor is large. Operand 0 is the output; operands 1..K-1 are inputs, all
// of storage type T, with `extra[k]` elements added to operand k's offsets.
// For each block, fn(out, in, n) computes on compute-typed views: for
// contiguous float32 data they point straight at the tensors, otherwise at
// staging buffers that are converted in and out here.
// kIsaVariants builds the block loop for baseline, AVX2 and AVX-512 and
// picks one at run time: worth it for compute-bound maps (silu's exp), not
// for plain memory-bound ones, which would only triple their code.
template <typename T, int K, bool kIsaVariants = false, typename Fn>
void MapBlocks(const ElementwiseLayout<K>& layout, void* const (&data)[K],
               const int64_t (&extra)[K], bool parallel, Fn&& fn) {
  const int64_t inner = layout.inner();
  const int64_t runs = layout.runs();
  if (runs == 0) return;
  const int64_t blocks_per_run = (inner + kBlock - 1) / kBlock;
  const int64_t total = runs * blocks_per_run;
  const bool go_parallel = parallel && layout.numel >= kParallelGrain;
  auto body = [&](int64_t block) {
    MapBlock<T, K>(layout, data, extra, block, blocks_per_run, fn);
  };
  if constexpr (kIsaVariants) {
    ParallelForIsa(total, go_parallel, body);
  } else {
    ParallelFor(total, go_parallel, body);
  }
}

}  // namespace polyops::cpu

#endif  // POLYOPS_CPU_KERNELS_ELEMENTWISE_ELEMENTWISE_H_
