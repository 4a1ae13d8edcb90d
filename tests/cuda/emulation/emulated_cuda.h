// A host stand-in for the CUDA runtime, <cuda_fp16.h> and <cuda_bf16.h>,
// enough to run on a CPU the CUDA slots that tests/cuda/test_cuda_{rows,
// attention,elementwise}_emulated.py cover and topk_topp_sampling's kernel
// (src/cuda/kernels/sampling/sampling.cuh, tests/cuda/
// test_cuda_sampling_emulated.py through sampling_main.cc), with the
// project's own cuda/runtime/common.cuh (WarpSum, WarpMax, BlockSum,
// BlockMax, FromFloat, ToFloat, Check, Workspace) compiled as it is. The
// slot tests rewrite each `kernel<<<grid, block, shared, stream>>>(args)` of
// the slot headers into `EmulatedLaunch(grid, block, shared, stream, [&] {
// kernel(args); })` and each `extern __shared__ T name[];` into a pointer to
// the launch's dynamic shared buffer (`shared` bytes, filled with 0xff bytes:
// NaN floats, so a read before a write shows); sampling_main.cc calls
// EmulatedLaunch itself. cuda_runtime.h, cuda_fp16.h and cuda_bf16.h in this
// folder include this file.
//
// A launch runs the grid's blocks one after another (x fastest, then y, z),
// each as blockDim.x cooperative threads (fibers with their own stacks on
// one OS thread, switched by hand: a std::thread per CUDA thread made the
// attention kernels' thousands of warp exchanges per block take minutes).
// A thread runs until it waits at a barrier: __syncthreads (the block's),
// or a warp collective (its warp's 32 threads, threadIdx.x / 32), so
// `__shared__` = `static` is one block's memory, and atomicAdd is atomic
// (no thread is switched out inside it). A block's threads are resumed in
// thread order, the next block's in reverse order. A round of the scheduler
// in which no thread arrives anywhere and none finishes is a deadlock (a
// barrier or warp collective some threads never reach): the driver stops
// with exit status 4 instead of hanging. Warp collectives -- the shuffles,
// __ballot_sync and __match_any_sync -- exchange through per-warp slots:
// every lane writes its value, the warp waits, every lane reads its source
// lane (or, for ballot and match_any, all the warp's slots), the warp waits
// again; lanes that meet at different collective call sites (divergence)
// stop the driver (exit status 6). __half and __nv_bfloat16 convert with
// polyops' own routines (round to nearest even); the _rn intrinsics
// (__fadd_rn, __fsub_rn, __fmul_rn, __fdiv_rn, __fsqrt_rn) are plain
// float32 operations, each rounded once, because every build of this
// emulation uses -ffp-contract=off (no fused multiply-add, as nvcc never
// contracts an _rn intrinsic); expf and the other float functions are the
// host's. It checks the kernels' logic -- indexing, masks, packs and their
// fallbacks, barriers, warp exchanges and reduction trees, in-place safety,
// host code, and for sampling the radix select, the stability of the
// compaction and sort and the order of the sums, bit for bit -- not nvcc, a
// GPU's scheduling or CUDA's own float functions. x86-64 only (the fiber
// switch is 15 instructions of assembly).
#ifndef POLYOPS_TESTS_CUDA_EMULATION_EMULATED_CUDA_H_
#define POLYOPS_TESTS_CUDA_EMULATION_EMULATED_CUDA_H_

#include <math.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <source_location>
#include <string>
#include <vector>

#include "core/data_type.h"
#include "core/error.h"
#include "core/handle.h"

#if !defined(__x86_64__)
#error "the CUDA emulation's fiber switch is written for x86-64"
#endif

#define __device__
#define __global__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(threads)

using cudaStream_t = void*;
using cudaError_t = int;
inline constexpr cudaError_t cudaSuccess = 0;
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };
enum cudaMemcpyKind { cudaMemcpyDeviceToDevice };

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1)
      : x(x_), y(y_), z(z_) {}
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};

// Set by the scheduler each time it resumes a thread.
inline dim3 threadIdx;
inline dim3 blockIdx;
inline dim3 blockDim;
inline dim3 gridDim;

// CUDA's 16-bit float types: 2-byte structs of their own (as in CUDA), so
// that cuda/runtime/common.cuh's ToFloat overloads do not collide with
// polyops'.
struct alignas(2) __half {
  uint16_t bits;
};
struct alignas(2) __nv_bfloat16 {
  uint16_t bits;
};
inline float __half2float(__half value) {
  return polyops::ToFloat(polyops::Half{value.bits});
}
inline __half __float2half_rn(float value) {
  return __half{polyops::ToHalf(value).bits};
}
inline float __bfloat162float(__nv_bfloat16 value) {
  return polyops::ToFloat(polyops::BFloat16{value.bits});
}
inline __nv_bfloat16 __float2bfloat16_rn(float value) {
  return __nv_bfloat16{polyops::ToBFloat16(value).bits};
}
using std::max;
using std::min;

// Saves the callee-saved registers and the stack pointer to *save_sp, then
// resumes the stack at load_sp (System V x86-64).
extern "C" void polyops_emulation_switch(void** save_sp, void* load_sp);
asm(R"(
  .pushsection .text
  .p2align 4
  .globl polyops_emulation_switch
  .type polyops_emulation_switch, @function
polyops_emulation_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size polyops_emulation_switch, .-polyops_emulation_switch
  .popsection
)");

namespace emulation {

struct Barrier {
  unsigned expected = 0;
  unsigned arrived = 0;
  uint64_t generation = 0;
};

struct Fiber {
  void* sp = nullptr;
  std::unique_ptr<char[]> stack;
  unsigned thread = 0;
  bool done = false;
};

inline constexpr size_t kStackBytes = 256 * 1024;

inline void* scheduler_sp = nullptr;
inline Fiber* current = nullptr;
inline std::function<void()>* body = nullptr;  // the launch's kernel call
inline uint64_t progress = 0;                  // arrivals and finished threads
inline std::vector<Fiber> fibers;
inline Barrier block_barrier;
inline Barrier warp_barriers[32];
inline uint64_t lanes[32][32];  // [warp][lane] shuffle slots
inline unsigned sites[32][32];  // [warp][lane] the shuffle's source line
inline std::vector<std::max_align_t> dynamic_shared;

inline void Yield() { polyops_emulation_switch(&current->sp, scheduler_sp); }

inline void Wait(Barrier& barrier) {
  ++progress;
  if (++barrier.arrived == barrier.expected) {
    barrier.arrived = 0;
    ++barrier.generation;
    return;
  }
  const uint64_t generation = barrier.generation;
  while (barrier.generation == generation) Yield();
}

[[noreturn]] inline void FiberEntry() {
  (*body)();
  current->done = true;
  ++progress;
  Yield();
  std::abort();  // a finished thread is never resumed
}

// A fresh stack whose first switch "returns" into FiberEntry with the ABI's
// entry alignment (rsp = 8 mod 16).
inline void Start(Fiber& fiber) {
  if (!fiber.stack) fiber.stack.reset(new char[kStackBytes]);
  auto top = reinterpret_cast<uintptr_t>(fiber.stack.get() + kStackBytes);
  auto* sp = reinterpret_cast<uintptr_t*>(top & ~uintptr_t{15});
  *--sp = 0;  // FiberEntry's return address: it never returns
  *--sp = reinterpret_cast<uintptr_t>(&FiberEntry);
  for (int r = 0; r < 6; ++r) *--sp = 0;  // rbp, rbx, r12-r15
  fiber.sp = sp;
  fiber.done = false;
}

// Runs one block's threads until all have finished: in thread order, or in
// reverse order when `reverse` (alternate blocks), so that a race a missing
// barrier leaves between warps shows under one of the two interleavings.
inline void RunBlock(unsigned threads, bool reverse) {
  block_barrier = Barrier{threads};
  for (unsigned w = 0; w * 32 < threads; ++w) {
    warp_barriers[w] = Barrier{std::min(32u, threads - w * 32)};
  }
  for (unsigned t = 0; t < threads; ++t) Start(fibers[t]);
  unsigned live = threads;
  while (live > 0) {
    const uint64_t before = progress;
    for (unsigned i = 0; i < threads; ++i) {
      const unsigned t = reverse ? threads - 1 - i : i;
      Fiber& fiber = fibers[t];
      if (fiber.done) continue;
      current = &fiber;
      threadIdx = dim3(t);
      polyops_emulation_switch(&scheduler_sp, fiber.sp);
      if (fiber.done) --live;
    }
    if (live > 0 && progress == before) {
      std::fprintf(stderr,
                   "emulated CUDA deadlock in block (%u, %u, %u): %u of %u "
                   "threads wait at a barrier or warp exchange the others "
                   "never reach\n",
                   blockIdx.x, blockIdx.y, blockIdx.z, live, threads);
      std::fflush(stderr);
      std::_Exit(4);
    }
  }
}

inline int Lane() { return static_cast<int>(threadIdx.x & 31); }
inline int Warp() { return static_cast<int>(threadIdx.x >> 5); }

// The value lane `lane` of the calling thread's warp published.
template <typename T>
T Slot(int lane) {
  T value;
  std::memcpy(&value, &lanes[Warp()][lane], sizeof(T));
  return value;
}

// The number of lanes of the calling thread's warp (32 but in a last,
// partial warp).
inline int WarpLanes() {
  return static_cast<int>(warp_barriers[Warp()].expected);
}

// Every lane publishes `value`, the warp waits, each lane computes `read()`
// from the warp's slots (Slot), and the warp waits again so that no slot is
// overwritten before all have read. `site`: the collective's call site,
// which every lane of the warp must share (a GPU's __shfl_*_sync,
// __ballot_sync and __match_any_sync with a full mask require all lanes at
// it).
template <typename T, typename Read>
auto Collect(T value, Read read, const std::source_location& site) {
  static_assert(sizeof(T) <= sizeof(uint64_t));
  lanes[Warp()][Lane()] = 0;
  std::memcpy(&lanes[Warp()][Lane()], &value, sizeof(T));
  sites[Warp()][Lane()] = site.line();
  Wait(warp_barriers[Warp()]);
  if (sites[Warp()][Lane()] != sites[Warp()][0]) {
    std::fprintf(stderr,
                 "emulated CUDA: lanes %d and 0 of warp %d in block (%u, %u, "
                 "%u) meet at warp collectives on different lines (%u, %u)\n",
                 Lane(), Warp(), blockIdx.x, blockIdx.y, blockIdx.z,
                 sites[Warp()][Lane()], sites[Warp()][0]);
    std::fflush(stderr);
    std::_Exit(6);
  }
  auto result = read();
  Wait(warp_barriers[Warp()]);
  return result;
}

// A shuffle: each lane reads lane `source(lane)` (its own value when the
// source is outside the warp).
template <typename T, typename Source>
T Exchange(T value, Source source, const std::source_location& site) {
  return Collect(
      value,
      [&] {
        const int from = source(Lane());
        return from >= 0 && from < WarpLanes() ? Slot<T>(from) : value;
      },
      site);
}

// The mask of the warp's lanes whose slot satisfies `test` (lanes past a
// partial warp's end are 0).
template <typename T, typename Test>
unsigned LaneMask(T value, Test test, const std::source_location& site) {
  return Collect(
      value,
      [&] {
        unsigned mask = 0;
        for (int lane = 0; lane < WarpLanes(); ++lane) {
          if (test(Slot<T>(lane))) mask |= 1u << lane;
        }
        return mask;
      },
      site);
}

}  // namespace emulation

inline void __syncthreads() { emulation::Wait(emulation::block_barrier); }

template <typename T>
T __shfl_sync(unsigned, T value, int source,
              std::source_location site = std::source_location::current()) {
  return emulation::Exchange(value, [&](int) { return source & 31; }, site);
}
template <typename T>
T __shfl_xor_sync(unsigned, T value, int mask,
                  std::source_location site = std::source_location::current()) {
  return emulation::Exchange(
      value, [&](int lane) { return lane ^ mask; }, site);
}
template <typename T>
T __shfl_down_sync(
    unsigned, T value, unsigned delta,
    std::source_location site = std::source_location::current()) {
  return emulation::Exchange(
      value, [&](int lane) { return lane + static_cast<int>(delta); }, site);
}
inline unsigned __ballot_sync(
    unsigned, int predicate,
    std::source_location site = std::source_location::current()) {
  return emulation::LaneMask(
      predicate != 0 ? 1u : 0u, [](unsigned slot) { return slot != 0; }, site);
}
inline unsigned __match_any_sync(
    unsigned, unsigned value,
    std::source_location site = std::source_location::current()) {
  return emulation::LaneMask(
      value, [&](unsigned slot) { return slot == value; }, site);
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline unsigned atomicAdd(unsigned* address, unsigned value) {
  const unsigned old = *address;  // no thread switch until it returns
  *address = old + value;
  return old;
}

inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline float __double2float_rn(double a) { return static_cast<float>(a); }
inline unsigned __float_as_uint(float x) { return polyops::FloatToBits(x); }
inline float __uint_as_float(unsigned bits) {
  return polyops::BitsToFloat(bits);
}
inline int __clzll(long long x) {
  return x == 0 ? 64 : __builtin_clzll(static_cast<unsigned long long>(x));
}

inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline const char* cudaGetErrorName(cudaError_t) { return "cudaErrorEmulated"; }
template <typename Kernel>
cudaError_t cudaFuncSetAttribute(Kernel, cudaFuncAttribute, int) {
  return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes,
                                   cudaMemcpyKind, cudaStream_t) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src,
                                     size_t spitch, size_t width, size_t height,
                                     cudaMemcpyKind, cudaStream_t) {
  if (width > dpitch || width > spitch) return 1;  // cudaErrorInvalidValue
  for (size_t row = 0; row < height; ++row) {
    std::memcpy(static_cast<char*>(dst) + row * dpitch,
                static_cast<const char*>(src) + row * spitch, width);
  }
  return cudaSuccess;
}

// kernel<<<grid, block, shared>>>: the blocks in order, each as block.x
// cooperative threads (the slots launch one-dimensional blocks).
template <typename Kernel>
void EmulatedLaunch(dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t,
                    Kernel kernel) {
  if (block.y != 1 || block.z != 1 || block.x == 0 || block.x > 1024) {
    std::fprintf(stderr, "emulated launch: unsupported block (%u, %u, %u)\n",
                 block.x, block.y, block.z);
    std::_Exit(5);
  }
  gridDim = grid;
  blockDim = block;
  std::function<void()> call = [&] { kernel(); };
  emulation::body = &call;
  const size_t words =
      (shared_bytes + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t);
  emulation::dynamic_shared.assign(words, std::max_align_t{});
  std::memset(emulation::dynamic_shared.data(), 0xff,
              words * sizeof(std::max_align_t));
  if (emulation::fibers.size() < block.x) emulation::fibers.resize(block.x);
  for (unsigned z = 0; z < grid.z; ++z) {
    for (unsigned y = 0; y < grid.y; ++y) {
      for (unsigned x = 0; x < grid.x; ++x) {
        blockIdx = dim3(x, y, z);
        emulation::RunBlock(block.x, (x + y + z) % 2 == 1);
      }
    }
  }
  emulation::body = nullptr;
}

namespace emulation {
// `extern __shared__ T name[]`, as the tests rewrite it.
template <typename T>
T* DynamicShared() {
  return reinterpret_cast<T*>(dynamic_shared.data());
}
}  // namespace emulation

// The project's own shared device code, compiled for the host as it is.
#include "cuda/runtime/common.cuh"

namespace polyops::cuda {

// cuda/runtime/workspace.cu's definitions, for the host: the scratch memory is
// host memory filled with 0xff bytes (NaN floats), so a partial the kernels
// forget to write shows.
inline void ThrowCudaError(cudaError_t status, const char* op,
                           const char* what) {
  throw BackendError(std::string("polyops.") + op + ": CUDA error during " +
                     what + ": " + cudaGetErrorName(status));
}

inline Workspace::Workspace(const Handle&, size_t bytes, const char*) {
  if (bytes == 0) return;
  data_ = new char[bytes];
  std::memset(data_, 0xff, bytes);
  size_ = bytes;
}

inline Workspace::~Workspace() { delete[] static_cast<char*>(data_); }

}  // namespace polyops::cuda

#endif  // POLYOPS_TESTS_CUDA_EMULATION_EMULATED_CUDA_H_
