#ifndef POLYOPS_ASCEND_CAUSAL_SOFTMAX_ACLNN_H_
#define POLYOPS_ASCEND_CAUSAL_SOFTMAX_ACLNN_H_

#include <atomic>
#include <cstdint>
#include <limits>
#include <mutex>
#include <optional>
#include <vector>

#include "ascend/runtime/aclnn_prepare.h"
#include "ascend/runtime/launch.h"
#include "base/causal_softmax.h"
#include "core/operator.h"

namespace polyops {

// Slot 0: CANN has no end-aligned causal softmax, so per call
//   aclnnInplaceCopy(out <- input)                  unless out is input,
//   aclnnInplaceMaskedFillScalar(out, mask, -inf)   mask [q, k] bool,
//                                                   1 iff j > i + k - q,
//   aclnnSoftmax(out, dim = -1, out),
//   aclnnInplaceMaskedFillScalar(out, mask, 0),
// all repeatable. The mask broadcasts over the leading dims; it is built on
// the host and copied to device memory the instance owns at its first call
// (one aclrtMemcpy), never again. Masked keys become -inf before the
// softmax, so their input is never read. The softmax gives them exactly 0
// unless the row's maximum is NaN or +inf (then every entry is NaN) or the
// row has no finite entry: the rows that see no key (q > k) are all -inf and
// come out NaN, and a row whose visible keys are all -inf is NaN too, as
// torch.softmax. The last fill restores the contract: masked keys are 0,
// rows that see no key all zeros, NaN rows stay NaN in their visible keys.
// With q = 1 nothing is masked: one softmax, input to out.
template <>
class Operator<CausalSoftmax, Device::Type::kAscend, 0> : public CausalSoftmax {
 public:
  static constexpr const char* kImplementationName = "aclnn";

  explicit Operator(const Args& args)
      : CausalSoftmax(args),
        neg_inf_(ascend::ScalarFloat(-std::numeric_limits<float>::infinity())),
        zero_(ascend::ScalarFloat(0.0f)),
        device_(args.input.device()) {}

  void operator()(const Handle& handle, const Args& args) const override {
    if (args.out->numel() == 0) return;
    static const auto copy = ascend::Phase2("aclnnInplaceCopy", "8.0.RC1");
    static const auto fill =
        ascend::Phase2("aclnnInplaceMaskedFillScalar", "8.0.RC1");
    static const auto softmax = ascend::Phase2("aclnnSoftmax", "8.0.RC1");
    using ascend::Operand;
    auto* neg_inf = const_cast<ascend::ScalarHandle*>(&neg_inf_);
    auto* zero = const_cast<ascend::ScalarHandle*>(&zero_);
    if (queries_ == 1) {
      ascend::RunSteps(kName, handle, 0,
                       {{&softmax_,
                         "aclnnSoftmax",
                         {Operand::In(args.input), Operand::Out(*args.out)},
                         &PrepareSoftmax,
                         nullptr,
                         softmax}});
      return;
    }
    UploadMasks();
    const ascend::Step copy_step{
        &copy_,
        "aclnnInplaceCopy",
        {Operand::Ref(*args.out), Operand::In(args.input)},
        &ascend::PrepareInplaceCopy,
        nullptr,
        copy};
    const ascend::Step mask_step{&mask_fill_,
                                 "aclnnInplaceMaskedFillScalar",
                                 {Operand::Ref(*args.out), Operand::In(mask_)},
                                 &ascend::PrepareInplaceMaskedFillScalar,
                                 neg_inf,
                                 fill};
    const ascend::Step softmax_step{
        &softmax_,
        "aclnnSoftmax",
        {Operand::In(*args.out), Operand::Out(*args.out)},
        &PrepareSoftmax,
        nullptr,
        softmax};
    const ascend::Step zero_step{&zero_fill_,
                                 "aclnnInplaceMaskedFillScalar",
                                 {Operand::Ref(*args.out), Operand::In(mask_)},
                                 &ascend::PrepareInplaceMaskedFillScalar,
                                 zero,
                                 fill};
    ascend::Step steps[4];
    size_t count = 0;
    // The kAliases check admits only out == input exactly (same view).
    if (args.out->data() != args.input.data()) steps[count++] = copy_step;
    steps[count++] = mask_step;
    steps[count++] = softmax_step;
    steps[count++] = zero_step;
    ascend::RunSteps(kName, handle, 0, steps, count);
  }

 private:
  // The mask, built and copied to the device at the instance's first call
  // (on the call's device: the bindings make it current).
  void UploadMasks() const {
    if (uploaded_.load(std::memory_order_acquire)) return;
    std::lock_guard<std::mutex> lock(upload_mutex_);
    if (uploaded_.load(std::memory_order_relaxed)) return;
    const int64_t q = queries_, k = keys_;
    std::vector<uint8_t> host(static_cast<size_t>(q * k), 0);
    for (int64_t i = 0; i < q; ++i) {
      for (int64_t j = 0; j < k; ++j) host[i * k + j] = j > i + k - q;
    }
    mask_memory_.Upload(host.data(), host.size());
    const int64_t shape[2] = {q, k}, strides[2] = {k, 1};
    mask_ = Tensor::FromParts(mask_memory_.data(), 2, shape, strides,
                              DataType::kBool, device_);
    uploaded_.store(true, std::memory_order_release);
  }

  static ascend::AclnnStatus PrepareSoftmax(void*, ascend::AclTensor* const* t,
                                            uint64_t* workspace,
                                            ascend::AclOpExecutor** executor) {
    using Fn = ascend::AclnnStatus (*)(const ascend::AclTensor*, int64_t,
                                       ascend::AclTensor*, uint64_t*,
                                       ascend::AclOpExecutor**);
    static const auto get =
        ascend::Phase1<Fn>("aclnnSoftmaxGetWorkspaceSize", "8.0.RC1");
    return get(t[0], -1, t[1], workspace, executor);
  }

  ascend::ScalarHandle neg_inf_;
  ascend::ScalarHandle zero_;
  Device device_;
  mutable std::mutex upload_mutex_;
  mutable std::atomic<bool> uploaded_{false};
  mutable ascend::DeviceBuffer mask_memory_;
  mutable Tensor mask_;  // [q, k] in mask_memory_
  mutable ascend::ExecutorCache copy_, mask_fill_, softmax_, zero_fill_;
};

}  // namespace polyops

#endif  // POLYOPS_ASCEND_CAUSAL_SOFTMAX_ACLNN_H_
