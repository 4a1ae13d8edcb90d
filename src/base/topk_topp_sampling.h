#ifndef POLYOPS_BASE_TOPK_TOPP_SAMPLING_H_
#define POLYOPS_BASE_TOPK_TOPP_SAMPLING_H_

#include <cmath>
#include <cstdint>
#include <optional>

#include "core/checks.h"
#include "core/handle.h"
#include "core/instance_cache.h"
#include "core/scalar_or_tensor.h"

namespace polyops {

// topk_topp_sampling(logits, top_k, top_p, *, uniform, seed, out) -> Tensor
//
// One token id per row of `logits`, drawn from softmax(logits) restricted to
// the top_k largest logits, then to the smallest prefix of those whose mass
// reaches top_p (top_k first, as vLLM and FlashInfer do). The result is a pure
// function of the inputs: every float operation below is specified, so the
// CPU and CUDA backends return the same ids bit for bit.
// One declared exception: on npu the token is a correct draw in the same
// order (tokens sorted as in step 2, the kept set a prefix of that order, u
// compared with the cumulative mass in that order) but not bit-exact, since
// aclnn's softmax and cumsum round their own way: it is the token whose
// cumulative-probability interval holds u up to float32 rounding (the test
// rule is polyops.testing.references.sampling_token_plausible). Its values
// of uniform and top_p are not checked (that would need a device-to-host
// copy), and seed= is NotImplementedError there; see docs/backends/ascend.md.
//   logits:  [B, V], float16, bfloat16 or float32, V >= 1; rows may have any
//            stride, the last dim must have stride 1. A bad row never fails
//            the batch (a serving engine needs a token in every row, the
//            other rows unchanged): NaN counts as -inf; if a row has +inf
//            logits, they share its mass equally; a row with neither a
//            finite nor a +inf logit samples uniformly over its tokens.
//   top_k:   an int (a float with an integer value is accepted), or an int32
//            or int64 tensor [B]; k <= 0 or k >= V keeps every token; tokens
//            tied with the k-th largest logit are kept too (as vLLM and
//            Hugging Face's top-k warper do).
//   top_p:   a float in (0, 1], or a float32 tensor [B] of such; a value that
//            rounds to 1.0 in float32 disables the top-p filter.
//   uniform: float32 [B] in [0, 1): the random number of each row.
//   seed:    an int; when given (and uniform is not), row b uses
//            u = SplitMix64Uniform(seed, b) (below). Exactly one of uniform
//            and seed must be given: polyops has no hidden global generator.
//   out:     int64 or int32 [B], contiguous (int32 as serving engines and
//            the FlashInfer and ATB samplers keep token ids; V <= INT32_MAX,
//            so every id fits); allocated int64 when omitted.
//
// Algorithm, per row, all arithmetic in IEEE float32 with round to nearest
// even and no fused multiply-add:
//   1. x = the row converted to float32 (exact for float16/bfloat16), NaN
//      replaced by -inf.
//   2. Order the V tokens by (x descending, token id ascending); -0.0 ties
//      with +0.0. Let s_0, s_1, ... be the ids in that order, m = x[s_0].
//   3. e_j = Exp(x[s_j] - m), Exp below (so e_0 = 1). If m = +inf instead
//      e_j = 1 where x[s_j] = +inf, else 0; if m = -inf, e_j = 1.
//   4. K = V if top_k <= 0 or top_k >= V, else the number of tokens with
//      x >= x[s_{top_k - 1}] (top_k plus the ties of the k-th).
//      C_0 = +0.0, C_{j+1} = C_j + e_j (sequential float32 sums). S_K = C_K.
//   5. p = top_p as float32. If p >= 1: P = K. Else P = the smallest P in
//      [1, K] with C_P >= p * S_K (the product rounded to float32), or K if
//      none (rounding).
//   6. u = uniform[b], or the seeded value; t = u * C_P (rounded to float32).
//      The result is s_j for the smallest j in [0, P) with C_{j+1} > t or
//      C_{j+1} == C_P (the second case only matters when t rounds up to C_P).
//   Exp(d), d <= 0: 0 if d < -80 (or d is -inf); else, with hex constants
//      L = 0x1.715476p+0, C1 = 0x1.63p-1, C2 = -0x1.bd0106p-13,
//      P0..P5 = 0x1.a0d2cep-13, 0x1.6e879cp-10, 0x1.11121p-7, 0x1.555382p-5,
//      0x1.555554p-3, 0x1.0p-1 (Cephes expf):
//        n = floor(d * L + 0.5); r = (d - n * C1) - n * C2;
//        q = ((((P0 * r + P1) * r + P2) * r + P3) * r + P4) * r + P5;
//        Exp = ((q * (r * r) + r) + 1) * 2**n  (2**n exact, n in [-116, 0]).
//      Its error is a few float32 ulp; the point is that it is the same
//      sequence of rounded operations everywhere (std::exp is not).
//   SplitMix64Uniform(seed, b): z = uint64(seed) + (b + 1) * 0x9e3779b97f4a7c15
//      (mod 2**64); z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
//      z = (z ^ (z >> 27)) * 0x94d049bb133111eb; z ^= z >> 31;
//      u = (z >> 40) * 2**-24, in [0, 1 - 2**-24].
//   Values of uniform and top_p tensors are checked when the kernel reads
//   them (ValueError; not on npu, see above); `out` is unspecified after
//   such an error.
class TopkToppSampling : public OperatorBase {
 public:
  static constexpr const char* kName = "topk_topp_sampling";
  static constexpr int kNumPositional = 3;
  // The kernel reads seed's value at call time; the instance only knows
  // whether it is given, so a new seed per step still hits the cache.
  static constexpr const char* kKeyedByPresence[] = {"seed"};

  // The call's arguments, in the constructor's order. Slots take them as
  // one struct: a new parameter touches this header and the slots that
  // read it.
  struct Args {
    const Tensor& logits;
    const ScalarOrTensor& top_k;
    const ScalarOrTensor& top_p;
    const std::optional<Tensor>& uniform;
    std::optional<int64_t> seed;
    const std::optional<Tensor>& out;
  };

  TopkToppSampling(const Tensor& logits, const ScalarOrTensor& top_k,
                   const ScalarOrTensor& top_p,
                   const std::optional<Tensor>& uniform = std::nullopt,
                   std::optional<int64_t> seed = std::nullopt,
                   const std::optional<Tensor>& out = std::nullopt) {
    const Tensor& output = RequireOutput(kName, "out", out);
    POLYOPS_CHECK(logits.ndim() == 2,
                  "polyops.topk_topp_sampling: logits must have shape [B, V], "
                  "got ",
                  logits.ShapeString());
    CheckFloatDtype(kName, "logits", logits);
    CheckLastDimContiguous(kName, "logits", logits);
    batch_ = logits.size(0);
    vocab_ = logits.size(1);
    POLYOPS_CHECK(vocab_ >= 1 && vocab_ <= INT32_MAX,
                  "polyops.topk_topp_sampling: logits must have between 1 and ",
                  INT32_MAX, " columns (V), got shape ", logits.ShapeString());
    dtype_ = logits.dtype();
    row_stride_ = logits.stride(0);

    if (top_k.tensor) {
      const Tensor& k = *top_k.tensor;
      POLYOPS_CHECK(
          k.dtype() == DataType::kInt32 || k.dtype() == DataType::kInt64,
          "polyops.topk_topp_sampling: top_k must be an int or an "
          "int32/int64 tensor, got a tensor of dtype ",
          DataTypeName(k.dtype()));
      CheckPerRow("top_k", k);
    } else {
      const double k = top_k.scalar;
      POLYOPS_CHECK(
          std::isfinite(k) && std::floor(k) == k,
          "polyops.topk_topp_sampling: top_k must be an integer, got ", k);
      top_k_ = (k <= 0 || k >= static_cast<double>(vocab_))
                   ? vocab_
                   : static_cast<int64_t>(k);
    }

    if (top_p.tensor) {
      const Tensor& p = *top_p.tensor;
      POLYOPS_CHECK(p.dtype() == DataType::kFloat32,
                    "polyops.topk_topp_sampling: top_p must be a float or a "
                    "float32 tensor, got a tensor of dtype ",
                    DataTypeName(p.dtype()));
      CheckPerRow("top_p", p);
    } else {
      const double p = top_p.scalar;
      POLYOPS_CHECK(p > 0 && p <= 1,
                    "polyops.topk_topp_sampling: top_p must be in (0, 1], got ",
                    p);
      top_p_ = static_cast<float>(p);
    }

    POLYOPS_CHECK(uniform.has_value() != seed.has_value(),
                  "polyops.topk_topp_sampling: pass exactly one of uniform= "
                  "(float32 [B] in [0, 1)) and seed= (an int), got ",
                  uniform ? "both" : "neither");
    if (uniform) {
      POLYOPS_CHECK(uniform->dtype() == DataType::kFloat32,
                    "polyops.topk_topp_sampling: uniform must have dtype "
                    "float32, got ",
                    DataTypeName(uniform->dtype()));
      CheckPerRow("uniform", *uniform);
    }

    POLYOPS_CHECK(output.dtype() == DataType::kInt64 ||
                      output.dtype() == DataType::kInt32,
                  "polyops.topk_topp_sampling: out must have dtype int64 or "
                  "int32, got ",
                  DataTypeName(output.dtype()));
    out_dtype_ = output.dtype();
    CheckPerRow("out", output);
    CheckContiguous(kName, "out", output);
  }

  explicit TopkToppSampling(const Args& args)
      : TopkToppSampling(args.logits, args.top_k, args.top_p, args.uniform,
                         args.seed, args.out) {}

  virtual void operator()(const Handle& handle, const Args& args) const = 0;

  static TensorMeta DefaultOut(const Tensor& logits,
                               const ScalarOrTensor& /*top_k*/,
                               const ScalarOrTensor& /*top_p*/,
                               const std::optional<Tensor>& /*uniform*/,
                               std::optional<int64_t> /*seed*/) {
    TensorMeta meta;
    meta.ndim = 1;
    meta.shape[0] = logits.ndim() >= 1 ? logits.size(0) : 0;
    meta.dtype = DataType::kInt64;
    return meta;
  }

 protected:
  void CheckPerRow(const char* name, const Tensor& tensor) const {
    POLYOPS_CHECK(tensor.ndim() == 1 && tensor.size(0) == batch_,
                  "polyops.topk_topp_sampling: ", name, " must have shape [",
                  batch_, "] (one value per row of logits), got ",
                  tensor.ShapeString());
  }

  int64_t batch_ = 0;
  int64_t vocab_ = 0;
  int64_t row_stride_ = 0;
  DataType dtype_ = DataType::kFloat32;
  DataType out_dtype_ = DataType::kInt64;  // int64 or int32
  // The scalar forms, normalized; unused when the argument is a tensor.
  int64_t top_k_ = 0;  // in [1, V]
  float top_p_ = 1.0f;
};

}  // namespace polyops

#endif  // POLYOPS_BASE_TOPK_TOPP_SAMPLING_H_
