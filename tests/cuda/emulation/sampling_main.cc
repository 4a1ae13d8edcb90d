// Runs src/cuda/kernels/sampling/sampling.cuh's SampleRows<float> under the
// host emulation of CUDA (emulated_cuda.h), for
// tests/cuda/test_cuda_sampling_emulated.py. stdin: "B V grid out_bits"
// (out_bits 64 or 32: the out dtype), then per row "k p u" (k an integer, p and
// u float32 bit patterns in hex) and V float32 bit patterns in hex. stdout: one
// token id per row.
#include <cstdio>
#include <vector>

#include "emulated_cuda.h"
// The kernel; its <cuda_runtime.h> is this folder's.
#include "cuda/kernels/sampling/sampling.cuh"

int main() {
  long long batch = 0, vocab = 0;
  unsigned grid = 1, out_bits = 64;
  if (std::scanf("%lld %lld %u %u", &batch, &vocab, &grid, &out_bits) != 4 ||
      (out_bits != 32 && out_bits != 64)) {
    return 2;
  }
  std::vector<float> logits(batch * vocab);
  std::vector<int64_t> top_k(batch);
  std::vector<float> top_p(batch), uniform(batch);
  for (long long b = 0; b < batch; ++b) {
    long long k;
    unsigned p, u;
    if (std::scanf("%lld %x %x", &k, &p, &u) != 3) return 2;
    top_k[b] = k;
    top_p[b] = __uint_as_float(p);
    uniform[b] = __uint_as_float(u);
    for (long long i = 0; i < vocab; ++i) {
      unsigned x;
      if (std::scanf("%x", &x) != 1) return 2;
      logits[b * vocab + i] = __uint_as_float(x);
    }
  }
  std::vector<int64_t> out64(batch, -7);
  std::vector<int32_t> out32(batch, -7);
  polyops::cuda::SamplingArgs args{};
  args.batch = batch;
  args.vocab = vocab;
  args.row_stride = vocab;
  args.top_k = top_k.data();
  args.top_k_int64 = true;
  args.top_k_stride = 1;
  args.top_p = top_p.data();
  args.top_p_stride = 1;
  args.uniform = uniform.data();
  args.uniform_stride = 1;
  args.out_int32 = out_bits == 32;
  args.out = args.out_int32 ? static_cast<void*>(out32.data()) : out64.data();
  std::vector<uint64_t> scratch(grid * 2 * vocab);
  EmulatedLaunch(
      dim3(grid), dim3(polyops::cuda::kSamplingThreads), 0, nullptr, [&] {
        polyops::cuda::SampleRows<float>(logits.data(), args, scratch.data());
      });
  for (long long b = 0; b < batch; ++b) {
    const long long token = out_bits == 32 ? out32[b] : out64[b];
    std::printf("%lld\n", token);
  }
  return 0;
}
