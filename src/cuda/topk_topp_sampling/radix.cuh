#ifndef POLYOPS_CUDA_TOPK_TOPP_SAMPLING_RADIX_CUH_
#define POLYOPS_CUDA_TOPK_TOPP_SAMPLING_RADIX_CUH_

#include <algorithm>
#include <cstdint>
#include <optional>

#include "base/topk_topp_sampling.h"
#include "core/dispatch.h"
#include "core/operator.h"
#include "cuda/kernels/sampling/sampling.cuh"
#include "cuda/runtime/common.cuh"

namespace polyops {

// Slot 0: one 512-thread block per row: a radix select of the top_k-th
// (logit, id) key, a stable compaction of the tokens that can be drawn, a
// stable block radix sort of them, then the base header's float32 sums in
// one thread, bit for bit the CPU slot's. Scratch: 16 bytes per vocabulary
// entry per row in flight, from cuda::Workspace.
template <>
class Operator<TopkToppSampling, Device::Type::kCuda, 0>
    : public TopkToppSampling {
 public:
  static constexpr const char* kImplementationName = "radix";

  explicit Operator(const Args& args) : TopkToppSampling(args) {
    if (batch_ == 0) return;
    int device = 0;
    int sms = 0;
    cuda::Check(cudaGetDevice(&device), kName, "reading the current device");
    cuda::Check(
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
        kName, "reading the SM count");
    // Rows in flight: enough blocks to fill the GPU, within 256 MiB of
    // scratch (a 256k vocabulary: 64 rows at a time).
    constexpr int64_t kScratchBudget = int64_t{256} << 20;
    const int64_t per_row = 2 * vocab_ * static_cast<int64_t>(sizeof(uint64_t));
    const int64_t by_memory = std::max<int64_t>(1, kScratchBudget / per_row);
    blocks_ = std::min({batch_, by_memory, int64_t{4} * std::max(sms, 1)});
    scratch_bytes_ = static_cast<size_t>(blocks_ * per_row);
  }

  void operator()(const Handle& handle, const Args& args) const override {
    if (batch_ == 0) return;
    cuda::SamplingArgs launch{};
    launch.batch = batch_;
    launch.vocab = vocab_;
    launch.row_stride = row_stride_;
    launch.top_k_scalar = top_k_;
    if (args.top_k.tensor) {
      launch.top_k = args.top_k.tensor->data();
      launch.top_k_int64 = args.top_k.tensor->dtype() == DataType::kInt64;
      launch.top_k_stride = args.top_k.tensor->stride(0);
    }
    launch.top_p_scalar = top_p_;
    if (args.top_p.tensor) {
      launch.top_p = args.top_p.tensor->data_as<float>();
      launch.top_p_stride = args.top_p.tensor->stride(0);
    }
    if (args.uniform) {
      launch.uniform = args.uniform->data_as<float>();
      launch.uniform_stride = args.uniform->stride(0);
    } else {
      launch.seed = *args.seed;
    }
    launch.out = args.out->data();
    launch.out_int32 = out_dtype_ == DataType::kInt32;
    cuda::Workspace scratch(handle, scratch_bytes_, kName);
    const cudaStream_t stream = cuda::StreamOf(handle);
    DispatchDataType<POLYOPS_FLOAT_TYPES>(dtype_, kName, [&](auto tag) {
      using T = typename decltype(tag)::type;
      cuda::SampleRows<<<static_cast<unsigned>(blocks_), cuda::kSamplingThreads,
                         0, stream>>>(
          reinterpret_cast<const cuda::NativeT<T>*>(args.logits.data_as<T>()),
          launch, static_cast<uint64_t*>(scratch.data()));
    });
    cuda::CheckLaunch(kName);
  }

 private:
  int64_t blocks_ = 0;
  size_t scratch_bytes_ = 0;
};

}  // namespace polyops

#endif  // POLYOPS_CUDA_TOPK_TOPP_SAMPLING_RADIX_CUH_
