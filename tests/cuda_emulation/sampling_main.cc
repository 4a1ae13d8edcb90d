// Runs src/cuda/sampling.cuh's SampleRows<float> under the host emulation
// (cuda_runtime.h here). stdin: "B V grid", then per row "k p u" (k an
// integer, p and u float32 bit patterns in hex) and V float32 bit patterns
// in hex. stdout: one token id per row.
#include <cstdio>
#include <vector>

#include "cuda_runtime.h"
// common.cuh needs the real CUDA headers; the kernel needs only ToFloat.
#define POLYOPS_CUDA_COMMON_CUH_
namespace polyops::cuda {
inline float ToFloat(float value) { return value; }
}  // namespace polyops::cuda
#include "cuda/sampling.cuh"

int main() {
  long long batch = 0, vocab = 0;
  unsigned grid = 1;
  if (std::scanf("%lld %lld %u", &batch, &vocab, &grid) != 3) return 2;
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
  std::vector<int64_t> out(batch, -7);
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
  args.out = out.data();
  std::vector<uint64_t> scratch(grid * 2 * vocab);
  EmulatedLaunch(grid, polyops::cuda::kSamplingThreads, [&] {
    polyops::cuda::SampleRows<float>(logits.data(), args, scratch.data());
  });
  for (int64_t token : out)
    std::printf("%lld\n", static_cast<long long>(token));
  return 0;
}
