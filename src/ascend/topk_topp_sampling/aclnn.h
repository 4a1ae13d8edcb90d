#ifndef POLYOPS_ASCEND_TOPK_TOPP_SAMPLING_ACLNN_H_
#define POLYOPS_ASCEND_TOPK_TOPP_SAMPLING_ACLNN_H_

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "ascend/kernels/sampling/sampling.h"
#include "ascend/runtime/launch.h"
#include "base/topk_topp_sampling.h"
#include "core/error.h"
#include "core/operator.h"

namespace polyops {

// Slot 0: aclnnApplyTopKTopP plus the sampling step, all on the device in
// float32, in one RunSteps unit (up to 16 repeatable launches, no host copy
// or synchronization after the instance's first call):
//   X  = Cast(logits, FLOAT)              float16/bfloat16 only
//   X' = NanToNum(X, nan = -M, posinf = M, neginf = -M), M = FLT_MAX
//   Y  = Flip(X', dim 1)
//   R, IR = Sort(Y, stable, ascending)
//   k  = Cast(Clamp(top_k, 0, V), INT32)   int64 top_k tensors only
//   p  = Clamp(NanToNum(top_p, nan = 1, posinf = 1, neginf = 0), 0, 1)
//   F  = ApplyTopKTopP(R, p, k)           masked = -inf
//   Q  = Softmax(F); A = Cumsum(Q)
//   v  = 1 - Clamp(u, 0, 1 - 2^-24)       Clamp, then Rsubs
//   m  = SearchSorted(A[:, :L], v, left)  L = max(V - 1, 1)
//   out = (V - 1) - Gather(IR, m)          Gather, then Rsubs (int64, or
//                                          converted to an int32 out)
// Why this shape:
// - NanToNum maps NaN and -inf to the same finite -M and +inf to +M, so the
//   contract's bad-row rules fall out of the ordinary softmax: +inf tokens
//   tie at the row max and share its mass, a row with no finite or +inf
//   logit is all -M and uniform, NaN ties with -inf (a finite logit equal to
//   +-M would tie with the infinities: accepted).
// - R is the contract's order (logit descending, id ascending) reversed:
//   Flip puts id V-1 first, so the stable ascending sort breaks ties by id
//   descending, and IR holds positions in Y (id = V - 1 - IR). Feeding
//   ApplyTopKTopP the reversed order makes its ascending cumulative top-p
//   cut drop exactly a prefix of R, i.e. keep a prefix of the contract's
//   order, even inside a group of tied logits (on the descending order it
//   would keep the wrong members of a tied group). Its top-k keeps every
//   value >= the k-th largest: the contract's ties of the k-th.
// - The contract picks the first kept rank j (descending) with C_{j+1} >
//   u * C_P. With A the ascending cumulative probability over R, that is the
//   first position m of R with A[m] >= 1 - u (j = V - 1 - m); searching
//   A[:, :V-1] caps m at V - 1 (the top token) when 1 - u rounds above the
//   total, and masked positions (A = 0 < 1 - u) are never chosen.
// An int32 out is written by that last Rsubs directly: its out may have any
// dtype the int64 result converts to (the aclnnRsubs doc and CANN's
// conversion rules: integer types convert to each other), so no step is
// added. Not bit-exact (the declared exception of
// src/base/topk_topp_sampling.h): aclnn's exp, softmax and cumsum round
// differently from the contract's sequential float32 sums, so the token is a
// correct draw judged by polyops.testing.references.sampling_token_plausible.
// Values the CPU kernel rejects at read time cannot be checked without a
// device-to-host copy: u is clamped to [0, 1 - 2^-24] (u < 0 acts as 0, u >=
// 1 as the largest u, NaN u gives the top token in the double, unverified on
// the chip); top_p is brought into [0, 1], ApplyTopKTopP's documented range
// (p <= 0 keeps the top token, p >= 1 and NaN filter nothing); int64 top_k
// values are clamped to [0, V] before the int32 cast.
// seed= is refused (NotImplementedError): SplitMix64 needs 64-bit integer
// multiplies that no aclnn operator offers, and computing u on the host
// needs an upload each call whose host buffer must outlive the queued copy.
// Scalar top_k / top_p become [B] device tensors uploaded once per instance
// at its first call (one synchronous aclrtMemcpy, never on later calls).
template <>
class Operator<TopkToppSampling, Device::Type::kAscend, 0>
    : public TopkToppSampling {
 public:
  static constexpr const char* kImplementationName = "aclnn";

  explicit Operator(const Args& args)
      : TopkToppSampling(args),
        device_(args.logits.device()),
        k_int64_(args.top_k.tensor &&
                 args.top_k.tensor->dtype() == DataType::kInt64),
        k_scalar_(!args.top_k.tensor),
        p_scalar_(!args.top_p.tensor) {
    if (args.seed) {
      throw NotImplemented(
          "polyops.topk_topp_sampling: seed= is not supported on npu (the "
          "seeded uniforms need 64-bit integer arithmetic that aclnn does "
          "not offer, or a host-to-device upload per call); pass uniform= "
          "(float32 [B] in [0, 1), e.g. torch.rand(B, device='npu'))");
    }
    const auto& rt = ascend::GetRuntime();
    flip_dims_.emplace(std::initializer_list<int64_t>{1});
    int64_t zero = 0, vocab = vocab_, last = vocab_ - 1, one = 1;
    const float u_low = 0.0f, u_high = 1.0f - 0x1p-24f, one_f = 1.0f;
    k_low_.emplace(rt.create_scalar(&zero, ascend::AclDataType::kInt64));
    k_high_.emplace(rt.create_scalar(&vocab, ascend::AclDataType::kInt64));
    u_low_.emplace(ascend::ScalarFloat(u_low));
    u_high_.emplace(ascend::ScalarFloat(u_high));
    one_float_.emplace(ascend::ScalarFloat(one_f));
    last_id_.emplace(rt.create_scalar(&last, ascend::AclDataType::kInt64));
    one_int_.emplace(rt.create_scalar(&one, ascend::AclDataType::kInt64));
    if (!k_low_->get() || !k_high_->get() || !last_id_->get() ||
        !one_int_->get()) {
      const char* message = rt.get_recent_err_msg();
      throw BackendError(
          detail::Concat("polyops.topk_topp_sampling: aclCreateScalar failed: ",
                         message ? message : "(no message)"));
    }

    k_bounds_ = {k_low_->get(), k_high_->get()};
    p_bounds_ = {u_low_->get(), one_float_->get()};
    u_bounds_ = {u_low_->get(), u_high_->get()};
    one_minus_ = {one_float_->get(), one_float_->get()};
    last_minus_ = {last_id_->get(), one_int_->get()};

    // Scratch: two float32 [B, V] rows, the int64 sort positions, and the
    // small per-row values, each on a 512-byte boundary.
    const int64_t b = batch_, v = vocab_;
    int64_t offset = 0;
    auto place = [&](int64_t bytes) {
      const int64_t at = offset;
      offset += ascend::ScratchAlign(bytes);
      return at;
    };
    const int64_t rows[2] = {b, v}, row_strides[2] = {v, 1};
    const int64_t cols[2] = {b, 1}, col_strides[2] = {1, 1};
    const int64_t seq[2] = {b, v > 1 ? v - 1 : 1};
    const int64_t per_row[1] = {b}, unit[1] = {1};
    a_ = View(2, rows, row_strides, DataType::kFloat32);
    b_ = View(2, rows, row_strides, DataType::kFloat32);
    positions_ = View(2, rows, row_strides, DataType::kInt64);
    sequence_ = View(2, seq, row_strides, DataType::kFloat32);
    w_ = View(2, cols, col_strides, DataType::kFloat32);
    v_ = View(2, cols, col_strides, DataType::kFloat32);
    m_ = View(2, cols, col_strides, DataType::kInt64);
    g_ = View(2, cols, col_strides, DataType::kInt64);
    k64_ = View(1, per_row, unit, DataType::kInt64);
    k32_ = View(1, per_row, unit, DataType::kInt32);
    p32_ = View(1, per_row, unit, DataType::kFloat32);
    p_raw_ = View(1, per_row, unit, DataType::kFloat32);
    a_at_ = place(b * v * 4);
    b_at_ = place(b * v * 4);
    positions_at_ = place(b * v * 8);
    w_at_ = place(b * 4);
    v_at_ = place(b * 4);
    m_at_ = place(b * 8);
    g_at_ = place(b * 8);
    k64_at_ = place(b * 8);
    k32_at_ = place(b * 4);
    p32_at_ = place(b * 4);
    p_raw_at_ = place(b * 4);
    scratch_bytes_ = offset;
  }

  void operator()(const Handle& handle, const Args& args) const override {
    if (batch_ == 0) return;
    using ascend::Operand;
    using ascend::Step;
    namespace sampling = ascend::sampling;
    static const auto cast = ascend::Phase2("aclnnCast", "8.0.RC1");
    static const auto nan_to_num = ascend::Phase2("aclnnNanToNum", "8.0.RC1");
    static const auto flip = ascend::Phase2("aclnnFlip", "8.0.RC1");
    static const auto sort = ascend::Phase2("aclnnSort", "8.0.RC1");
    static const auto clamp = ascend::Phase2("aclnnClamp", "8.0.RC1");
    static const auto filter =
        ascend::Phase2("aclnnApplyTopKTopP", "8.2.RC1.alpha003");
    static const auto softmax = ascend::Phase2("aclnnSoftmax", "8.0.RC1");
    static const auto cumsum = ascend::Phase2("aclnnCumsum", "8.0.RC1");
    static const auto rsubs = ascend::Phase2("aclnnRsubs", "8.0.RC1");
    static const auto search = ascend::Phase2("aclnnSearchSorted", "8.0.RC1");
    static const auto gather = ascend::Phase2("aclnnGather", "8.0.RC1");
    UploadConstants();
    auto* self = const_cast<Operator*>(this);

    const bool f32 = dtype_ == DataType::kFloat32;
    const Tensor k = k_scalar_ ? k_constant_ : *args.top_k.tensor;
    const Tensor p = p_scalar_ ? p_constant_ : *args.top_p.tensor;
    const int64_t u_shape[2] = {batch_, 1};
    const int64_t u_strides[2] = {args.uniform->stride(0), 1};
    const Tensor u = Tensor::FromParts(args.uniform->data(), 2, u_shape,
                                       u_strides, DataType::kFloat32, device_);
    const int64_t out_strides[2] = {1, 1};
    const Tensor token = Tensor::FromParts(args.out->data(), 2, u_shape,
                                           out_strides, out_dtype_, device_);

    const Step cast_step{
        &cast_,
        "aclnnCast",
        {Operand::In(args.logits), Operand::Scratch(a_, a_at_)},
        &sampling::PrepareCastFloat,
        nullptr,
        cast};
    const Step nan_from_logits{
        &nan_to_num_,
        "aclnnNanToNum",
        {Operand::In(args.logits), Operand::Scratch(b_, b_at_)},
        &sampling::PrepareNanToNumLogits,
        nullptr,
        nan_to_num};
    const Step nan_from_cast{
        &nan_to_num_,
        "aclnnNanToNum",
        {Operand::ScratchIn(a_, a_at_), Operand::Scratch(b_, b_at_)},
        &sampling::PrepareNanToNumLogits,
        nullptr,
        nan_to_num};
    const Step flip_step{
        &flip_,
        "aclnnFlip",
        {Operand::ScratchIn(b_, b_at_), Operand::Scratch(a_, a_at_)},
        &sampling::PrepareFlip,
        &*self->flip_dims_,
        flip};
    const Step sort_step{
        &sort_,
        "aclnnSort",
        {Operand::ScratchIn(a_, a_at_), Operand::Scratch(b_, b_at_),
         Operand::Scratch(positions_, positions_at_)},
        &sampling::PrepareStableSortAscending,
        nullptr,
        sort};
    const Step clamp_k{&clamp_k_,
                       "aclnnClamp",
                       {Operand::In(k), Operand::Scratch(k64_, k64_at_)},
                       &sampling::PrepareClamp,
                       &self->k_bounds_,
                       clamp};
    const Step cast_k{
        &cast_k_,
        "aclnnCast",
        {Operand::ScratchIn(k64_, k64_at_), Operand::Scratch(k32_, k32_at_)},
        &sampling::PrepareCastInt32,
        nullptr,
        cast};
    const Step nan_p{&nan_p_,
                     "aclnnNanToNum",
                     {Operand::In(p), Operand::Scratch(p_raw_, p_raw_at_)},
                     &sampling::PrepareNanToNumP,
                     nullptr,
                     nan_to_num};
    const Step clamp_p{&clamp_p_,
                       "aclnnClamp",
                       {Operand::ScratchIn(p_raw_, p_raw_at_),
                        Operand::Scratch(p32_, p32_at_)},
                       &sampling::PrepareClamp,
                       &self->p_bounds_,
                       clamp};
    const Step filter_with_k{
        &filter_,
        "aclnnApplyTopKTopP",
        {Operand::ScratchIn(b_, b_at_), Operand::ScratchIn(p32_, p32_at_),
         Operand::In(k), Operand::Scratch(a_, a_at_)},
        &sampling::PrepareApplyTopKTopP,
        nullptr,
        filter};
    const Step filter_with_k32{
        &filter_,
        "aclnnApplyTopKTopP",
        {Operand::ScratchIn(b_, b_at_), Operand::ScratchIn(p32_, p32_at_),
         Operand::ScratchIn(k32_, k32_at_), Operand::Scratch(a_, a_at_)},
        &sampling::PrepareApplyTopKTopP,
        nullptr,
        filter};
    const Step softmax_step{
        &softmax_,
        "aclnnSoftmax",
        {Operand::ScratchIn(a_, a_at_), Operand::Scratch(b_, b_at_)},
        &sampling::PrepareSoftmaxLastDim,
        nullptr,
        softmax};
    const Step cumsum_step{
        &cumsum_,
        "aclnnCumsum",
        {Operand::ScratchIn(b_, b_at_), Operand::Scratch(a_, a_at_)},
        &sampling::PrepareCumsumRows,
        nullptr,
        cumsum};
    const Step clamp_u{&clamp_u_,
                       "aclnnClamp",
                       {Operand::In(u), Operand::Scratch(w_, w_at_)},
                       &sampling::PrepareClamp,
                       &self->u_bounds_,
                       clamp};
    const Step flip_u{
        &flip_u_,
        "aclnnRsubs",
        {Operand::ScratchIn(w_, w_at_), Operand::Scratch(v_, v_at_)},
        &sampling::PrepareRsubs,
        &self->one_minus_,
        rsubs};
    const Step search_step{
        &search_,
        "aclnnSearchSorted",
        {Operand::ScratchIn(sequence_, a_at_), Operand::ScratchIn(v_, v_at_),
         Operand::Scratch(m_, m_at_)},
        &sampling::PrepareSearchSortedLeft,
        nullptr,
        search};
    const Step gather_step{
        &gather_,
        "aclnnGather",
        {Operand::ScratchIn(positions_, positions_at_),
         Operand::ScratchIn(m_, m_at_), Operand::Scratch(g_, g_at_)},
        &sampling::PrepareGatherRows,
        nullptr,
        gather};
    const Step id_step{&to_id_,
                       "aclnnRsubs",
                       {Operand::ScratchIn(g_, g_at_), Operand::Out(token)},
                       &sampling::PrepareRsubs,
                       &self->last_minus_,
                       rsubs};

    Step steps[ascend::kMaxSteps];
    size_t count = 0;
    if (!f32) steps[count++] = cast_step;
    steps[count++] = f32 ? nan_from_logits : nan_from_cast;
    steps[count++] = flip_step;
    steps[count++] = sort_step;
    if (k_int64_) {
      steps[count++] = clamp_k;
      steps[count++] = cast_k;
    }
    steps[count++] = nan_p;
    steps[count++] = clamp_p;
    steps[count++] = k_int64_ ? filter_with_k32 : filter_with_k;
    steps[count++] = softmax_step;
    steps[count++] = cumsum_step;
    steps[count++] = clamp_u;
    steps[count++] = flip_u;
    steps[count++] = search_step;
    steps[count++] = gather_step;
    steps[count++] = id_step;
    ascend::RunSteps(kName, handle, scratch_bytes_, steps, count);
  }

 private:
  Tensor View(int ndim, const int64_t* shape, const int64_t* strides,
              DataType dtype) const {
    return Tensor::FromParts(nullptr, ndim, shape, strides, dtype, device_);
  }

  // The scalar top_k / top_p as [B] device tensors (int32 k, 0 = no top-k;
  // float32 p), uploaded at the instance's first call on the call's device.
  void UploadConstants() const {
    if (!k_scalar_ && !p_scalar_) return;
    if (uploaded_.load(std::memory_order_acquire)) return;
    std::lock_guard<std::mutex> lock(upload_mutex_);
    if (uploaded_.load(std::memory_order_relaxed)) return;
    const int64_t shape[1] = {batch_}, strides[1] = {1};
    if (k_scalar_) {
      const int32_t k = top_k_ >= vocab_ ? 0 : static_cast<int32_t>(top_k_);
      std::vector<int32_t> host(static_cast<size_t>(batch_), k);
      k_memory_.Upload(host.data(), host.size() * sizeof(int32_t));
      k_constant_ = Tensor::FromParts(k_memory_.data(), 1, shape, strides,
                                      DataType::kInt32, device_);
    }
    if (p_scalar_) {
      std::vector<float> host(static_cast<size_t>(batch_), top_p_);
      p_memory_.Upload(host.data(), host.size() * sizeof(float));
      p_constant_ = Tensor::FromParts(p_memory_.data(), 1, shape, strides,
                                      DataType::kFloat32, device_);
    }
    uploaded_.store(true, std::memory_order_release);
  }

  Device device_;
  bool k_int64_;
  bool k_scalar_;
  bool p_scalar_;
  std::optional<ascend::IntArrayHandle> flip_dims_;
  std::optional<ascend::ScalarHandle> k_low_, k_high_, u_low_, u_high_,
      one_float_, last_id_, one_int_;
  // Their pairs as Clamp (min, max) and Rsubs (other, alpha) take them.
  ascend::sampling::ScalarPair k_bounds_, p_bounds_, u_bounds_, one_minus_,
      last_minus_;
  // Scratch views (shapes only) and their byte offsets in the pool.
  Tensor a_, b_, positions_, sequence_, w_, v_, m_, g_, k64_, k32_, p32_,
      p_raw_;
  int64_t a_at_ = 0, b_at_ = 0, positions_at_ = 0, w_at_ = 0, v_at_ = 0,
          m_at_ = 0, g_at_ = 0, k64_at_ = 0, k32_at_ = 0, p32_at_ = 0,
          p_raw_at_ = 0;
  int64_t scratch_bytes_ = 0;
  mutable std::mutex upload_mutex_;
  mutable std::atomic<bool> uploaded_{false};
  mutable ascend::DeviceBuffer k_memory_, p_memory_;
  mutable Tensor k_constant_, p_constant_;
  mutable ascend::ExecutorCache cast_, nan_to_num_, flip_, sort_, clamp_k_,
      cast_k_, nan_p_, clamp_p_, filter_, softmax_, cumsum_, clamp_u_, flip_u_,
      search_, gather_, to_id_;
};

}  // namespace polyops

#endif  // POLYOPS_ASCEND_TOPK_TOPP_SAMPLING_ACLNN_H_
