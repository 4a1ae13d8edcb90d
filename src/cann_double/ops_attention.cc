// libopapi.so of the CANN test double: attention, prefill
// (FusedInferAttentionScoreV3) and decode (IncreFlashAttentionV4), over one
// float64 reference (AttendToken; prototypes: docs/backends/ascend.md, "CANN
// sources and traps"). One file per op family, so an op is found by its family.
//
// Block tables and the attention mask are device data, read only inside the
// queued computation; a bad value there (a block id outside the cache, a mask
// that is not the causal one) is a run-time fault reported by the
// synchronizing call (507899), as a kernel exception is on the NPU. Host
// arrays (aclIntArray) are read in phase 1.
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "kernels.h"

using namespace cann_double;  // NOLINT: the C entry points below

namespace {

// Where key/value token data lives. `a` is a token index (kTokens), a block
// id (paged) or a batch index (batch layouts); `j` the position within the
// block or sequence.
enum class KvLayout {
  kTokens,  // [T, N, D]
  kBsh,     // [blocks or B, S, N*D]
  kBnsd,    // [blocks or B, N, S, D]
  kBsnd,    // [B, S, N, D]
};

int64_t KvOffset(const TensorView& t, KvLayout layout, int64_t a, int64_t j,
                 int64_t h, int64_t d, int64_t head_dim) {
  const auto& s = t.strides;
  switch (layout) {
    case KvLayout::kTokens:
      return t.offset + a * s[0] + h * s[1] + d * s[2];
    case KvLayout::kBsh:
      return t.offset + a * s[0] + j * s[1] + (h * head_dim + d) * s[2];
    case KvLayout::kBnsd:
      return t.offset + a * s[0] + h * s[1] + j * s[2] + d * s[3];
    case KvLayout::kBsnd:
      return t.offset + a * s[0] + j * s[1] + h * s[2] + d * s[3];
  }
  return 0;
}

// Heads and head dim of a key/value cache in a KvLayout.
bool KvShape(const TensorView& t, KvLayout layout, int64_t kv_heads,
             int64_t* head_dim, int64_t* seq) {
  switch (layout) {
    case KvLayout::kTokens:
      if (t.Dim() != 3 || t.dims[1] != kv_heads) return false;
      *head_dim = t.dims[2];
      *seq = t.dims[0];
      return true;
    case KvLayout::kBsh:
      if (t.Dim() != 3 || kv_heads <= 0 || t.dims[2] % kv_heads != 0) {
        return false;
      }
      *head_dim = t.dims[2] / kv_heads;
      *seq = t.dims[1];
      return true;
    case KvLayout::kBnsd:
      if (t.Dim() != 4 || t.dims[1] != kv_heads) return false;
      *head_dim = t.dims[3];
      *seq = t.dims[2];
      return true;
    case KvLayout::kBsnd:
      if (t.Dim() != 4 || t.dims[2] != kv_heads) return false;
      *head_dim = t.dims[3];
      *seq = t.dims[1];
      return true;
  }
  return false;
}

struct KeyRef {
  int64_t a;
  int64_t j;
};

// Attention of one query token (all heads) over the keys `keys`, of which
// those with position in [lo, hi] are visible. q_at(h, d) / out_at(h, d)
// give element offsets; lse (may be null) gets log-sum-exp per head.
template <typename QAt, typename OutAt, typename LseAt>
void AttendToken(const TensorView& q, QAt q_at, const TensorView& out,
                 OutAt out_at, const TensorView* lse, LseAt lse_at,
                 const TensorView& k, const TensorView& v, KvLayout layout,
                 const std::vector<KeyRef>& keys, int64_t lo, int64_t hi,
                 int64_t heads, int64_t group, int64_t dk, int64_t dv,
                 double scale) {
  lo = std::max<int64_t>(lo, 0);
  hi = std::min<int64_t>(hi, static_cast<int64_t>(keys.size()) - 1);
  std::vector<double> qrow(dk), scores, acc(dv);
  for (int64_t h = 0; h < heads; ++h) {
    const int64_t kvh = h / group;
    for (int64_t d = 0; d < dk; ++d) qrow[d] = LoadDouble(q, q_at(h, d));
    scores.assign(hi >= lo ? hi - lo + 1 : 0, 0);
    double max = -kInf;
    for (int64_t j = lo; j <= hi; ++j) {
      double s = 0;
      for (int64_t d = 0; d < dk; ++d) {
        s += qrow[d] * LoadDouble(k, KvOffset(k, layout, keys[j].a, keys[j].j,
                                              kvh, d, dk));
      }
      scores[j - lo] = s * scale;
      max = std::max(max, scores[j - lo]);
    }
    std::fill(acc.begin(), acc.end(), 0);
    double sum = 0;
    for (int64_t j = lo; j <= hi; ++j) {
      const double p = std::exp(scores[j - lo] - max);
      sum += p;
      for (int64_t d = 0; d < dv; ++d) {
        acc[d] += p * LoadDouble(v, KvOffset(v, layout, keys[j].a, keys[j].j,
                                             kvh, d, dv));
      }
    }
    // A query that sees no key gets zeros and a log-sum-exp of -inf (the
    // log of an empty sum), so merging partial results weights it by 0.
    for (int64_t d = 0; d < dv; ++d) {
      StoreDouble(out, out_at(h, d), sum > 0 ? acc[d] / sum : 0.0);
    }
    if (lse != nullptr) {
      StoreDouble(*lse, lse_at(h), sum > 0 ? max + std::log(sum) : -kInf);
    }
  }
}

// Resolves key positions [0, len) of request r through the block table.
bool PagedKeys(const TensorView& block_table, int64_t r, int64_t len,
               int64_t block_size, int64_t num_blocks,
               std::vector<KeyRef>* keys, std::string* why) {
  keys->resize(len);
  for (int64_t j = 0; j < len; ++j) {
    const int64_t entry = block_table.offset + r * block_table.strides[0] +
                          (j / block_size) * block_table.strides[1];
    const int64_t block = LoadInt(block_table, entry);
    if (block < 0 || block >= num_blocks) {
      *why = "blockTable[" + std::to_string(r) + "][" +
             std::to_string(j / block_size) + "] = " + std::to_string(block) +
             " is not a block of the " + std::to_string(num_blocks) +
             "-block cache";
      return false;
    }
    (*keys)[j] = {block, j % block_size};
  }
  return true;
}

// Checks that a cumulative host array is non-decreasing from >= 0.
bool Cumulative(const std::vector<int64_t>& v) {
  int64_t previous = 0;
  for (int64_t x : v) {
    if (x < previous) return false;
    previous = x;
  }
  return true;
}

}  // namespace

// ---- aclnnFusedInferAttentionScoreV3 (TND)
// ------------------------------------------

namespace {

constexpr int64_t kMaskSize = 2048;

// Run time: the compressed mask of sparseMode 3/4 must be triu(diagonal=1)
// (1 = masked); the kernel derives the causal/band pattern from it.
bool IsCausalMask(const TensorView& m) {
  for (int64_t i = 0; i < kMaskSize; ++i) {
    for (int64_t j = 0; j < kMaskSize; ++j) {
      const bool set =
          LoadDouble(m, m.offset + i * m.strides[0] + j * m.strides[1]) != 0;
      if (set != (j > i)) return false;
    }
  }
  return true;
}

// Optional inputs the double does not implement must be NULL.
void RequireNull(
    OpBuilder& b, const char* op_part,
    std::initializer_list<std::pair<const void*, const char*>> args) {
  for (const auto& [p, name] : args) {
    b.Check(p == nullptr, kParamInvalid,
            std::string(name) + " is not implemented by the double (" +
                op_part + "); pass NULL");
  }
}

// query, then key and value as one-tensor lists (the double's only form).
void AttentionInputs(OpBuilder& b, const aclTensor* query,
                     const aclTensorList* key, const aclTensorList* value,
                     int* sq, int* sk, int* sv) {
  int key_count = 0;
  int value_count = 0;
  *sq = b.In(query, "query");
  *sk = b.InList(key, "key", &key_count);
  *sv = b.InList(value, "value", &value_count);
  b.Check(key_count == 1 && value_count == 1, kParamInvalid,
          "the double takes key and value as one-tensor lists");
}

}  // namespace

DOUBLE_API aclnnStatus aclnnFusedInferAttentionScoreV3GetWorkspaceSize(
    const aclTensor* query, const aclTensorList* key,
    const aclTensorList* value, const aclTensor* pseShiftOptional,
    const aclTensor* attenMaskOptional,
    const aclIntArray* actualSeqLengthsOptional,
    const aclIntArray* actualSeqLengthsKvOptional,
    const aclTensor* deqScale1Optional, const aclTensor* quantScale1Optional,
    const aclTensor* deqScale2Optional, const aclTensor* quantScale2Optional,
    const aclTensor* quantOffset2Optional,
    const aclTensor* antiquantScaleOptional,
    const aclTensor* antiquantOffsetOptional,
    const aclTensor* blockTableOptional,
    const aclTensor* queryPaddingSizeOptional,
    const aclTensor* kvPaddingSizeOptional,
    const aclTensor* keyAntiquantScaleOptional,
    const aclTensor* keyAntiquantOffsetOptional,
    const aclTensor* valueAntiquantScaleOptional,
    const aclTensor* valueAntiquantOffsetOptional,
    const aclTensor* keySharedPrefixOptional,
    const aclTensor* valueSharedPrefixOptional,
    const aclIntArray* actualSharedPrefixLenOptional,
    const aclTensor* queryRopeOptional, const aclTensor* keyRopeOptional,
    const aclTensor* keyRopeAntiquantScaleOptional, int64_t numHeads,
    double scaleValue, int64_t preTokens, int64_t nextTokens, char* inputLayout,
    int64_t numKeyValueHeads, int64_t sparseMode, int64_t innerPrecise,
    int64_t blockSize, int64_t antiquantMode, bool softmaxLseFlag,
    int64_t keyAntiquantMode, int64_t valueAntiquantMode,
    const aclTensor* attentionOut, const aclTensor* softmaxLse,
    uint64_t* workspaceSize, aclOpExecutor** executor) {
  (void)innerPrecise, (void)antiquantMode, (void)keyAntiquantMode,
      (void)valueAntiquantMode;
  OpBuilder b("aclnnFusedInferAttentionScoreV3", workspaceSize, executor);
  // Slots in signature order (the aclSetInputTensorAddr index space).
  int sq, sk, sv;
  AttentionInputs(b, query, key, value, &sq, &sk, &sv);
  b.OptIn(pseShiftOptional, "pseShiftOptional");
  const int sm = b.OptIn(attenMaskOptional, "attenMaskOptional");
  RequireNull(
      b, "quantization",
      {{deqScale1Optional, "deqScale1Optional"},
       {quantScale1Optional, "quantScale1Optional"},
       {deqScale2Optional, "deqScale2Optional"},
       {quantScale2Optional, "quantScale2Optional"},
       {quantOffset2Optional, "quantOffset2Optional"},
       {antiquantScaleOptional, "antiquantScaleOptional"},
       {antiquantOffsetOptional, "antiquantOffsetOptional"},
       {keyAntiquantScaleOptional, "keyAntiquantScaleOptional"},
       {keyAntiquantOffsetOptional, "keyAntiquantOffsetOptional"},
       {valueAntiquantScaleOptional, "valueAntiquantScaleOptional"},
       {valueAntiquantOffsetOptional, "valueAntiquantOffsetOptional"},
       {keyRopeAntiquantScaleOptional, "keyRopeAntiquantScaleOptional"}});
  RequireNull(b, "other features",
              {{pseShiftOptional, "pseShiftOptional"},
               {queryPaddingSizeOptional, "queryPaddingSizeOptional"},
               {kvPaddingSizeOptional, "kvPaddingSizeOptional"},
               {keySharedPrefixOptional, "keySharedPrefixOptional"},
               {valueSharedPrefixOptional, "valueSharedPrefixOptional"},
               {actualSharedPrefixLenOptional, "actualSharedPrefixLenOptional"},
               {queryRopeOptional, "queryRopeOptional"},
               {keyRopeOptional, "keyRopeOptional"}});
  const int sbt = b.OptIn(blockTableOptional, "blockTableOptional");
  const aclIntArray* q_lens =
      b.IntArray(actualSeqLengthsOptional, "actualSeqLengthsOptional", false);
  const aclIntArray* kv_lens = b.IntArray(actualSeqLengthsKvOptional,
                                          "actualSeqLengthsKvOptional", false);
  const int so = b.Out(attentionOut, "attentionOut");
  const int sl = b.OptOut(softmaxLse, "softmaxLse");
  if (!b.ok()) return b.Launch(0, nullptr);

  b.Check(Text(inputLayout) == "TND", kParamInvalid,
          "inputLayout \"" + Text(inputLayout) +
              "\": the double implements \"TND\"");
  const TensorView& q = b.V(sq);
  b.Check(q.Dim() == 3 && (q.dtype == kFloat16 || q.dtype == kBf16),
          kParamInvalid, "query must be a FLOAT16 or BF16 [T, N, D] tensor");
  if (!b.ok()) return b.Launch(0, nullptr);
  const TensorView& k = b.V(sk);
  const TensorView& vv = b.V(sv);
  const int64_t kv_heads = numKeyValueHeads == 0 ? numHeads : numKeyValueHeads;
  b.Check(numHeads == q.dims[1], kParamInvalid,
          "numHeads " + std::to_string(numHeads) + " differs from query " +
              ShapeText(q.dims));
  b.Check(kv_heads > 0 && numHeads % kv_heads == 0 && numHeads / kv_heads <= 64,
          kParamInvalid,
          "numHeads % numKeyValueHeads must be 0 with a ratio <= 64");
  b.Check(k.dtype == q.dtype && vv.dtype == q.dtype, kParamInvalid,
          "key/value must have the query dtype");
  b.Check(q_lens != nullptr, kParamInvalid,
          "actualSeqLengths is mandatory for TND");
  b.Check(kv_lens != nullptr, kParamInvalid,
          "actualSeqLengthsKv is mandatory for TND");
  if (!b.ok()) return b.Launch(0, nullptr);
  const std::vector<int64_t> q_ends = q_lens->values;
  const std::vector<int64_t> kv_values = kv_lens->values;
  const int64_t batch = static_cast<int64_t>(q_ends.size());
  const int64_t tokens = q.dims[0];
  b.Check(batch > 0 && Cumulative(q_ends), kParamInvalid,
          "actualSeqLengths must be cumulative query end offsets");
  b.Check(!b.ok() || q_ends.back() == tokens, kTilingError,
          "the last actualSeqLengths value must equal T = " +
              std::to_string(tokens));
  b.Check(static_cast<int64_t>(kv_values.size()) == batch, kTilingError,
          "actualSeqLengthsKv has " + std::to_string(kv_values.size()) +
              " entries for a batch of " + std::to_string(batch));
  const bool paged = b.V(sbt).present;
  KvLayout layout = KvLayout::kTokens;
  int64_t dk = 0, dv = 0, seq = 0, value_seq = 0;
  int64_t num_blocks = 0;
  if (paged) {
    const TensorView& bt = b.V(sbt);
    layout = k.Dim() == 4 ? KvLayout::kBnsd : KvLayout::kBsh;
    b.Check(bt.dtype == kInt32 && bt.Dim() == 2, kParamInvalid,
            "blockTable must be a 2-D INT32 tensor");
    b.Check(blockSize > 0 && blockSize <= 512, kParamInvalid,
            "blockSize " + std::to_string(blockSize) + " must be in [1, 512]");
    if (!b.ok()) return b.Launch(0, nullptr);
    b.Check(bt.dims[0] == batch, kTilingError,
            "blockTable has " + std::to_string(bt.dims[0]) +
                " rows for a batch of " + std::to_string(batch));
    for (int64_t len : kv_values) {
      b.Check(len >= 0 && len <= bt.dims[1] * blockSize, kParamInvalid,
              "a kv length " + std::to_string(len) +
                  " exceeds blockTable width * blockSize");
    }
    num_blocks = k.Dim() > 0 ? k.dims[0] : 0;
  } else {
    b.Check(Cumulative(kv_values), kParamInvalid,
            "without paging actualSeqLengthsKv must be cumulative");
  }
  b.Check(KvShape(k, layout, kv_heads, &dk, &seq) &&
              KvShape(vv, layout, kv_heads, &dv, &value_seq) &&
              seq == value_seq,
          kParamInvalid,
          "key " + ShapeText(k.dims) + " / value " + ShapeText(vv.dims) +
              " do not fit the layout with " + std::to_string(kv_heads) +
              " kv heads");
  if (!b.ok()) return b.Launch(0, nullptr);
  b.Check(!paged || (seq == blockSize && vv.dims[0] == k.dims[0]),
          kParamInvalid, "cache block dim must equal blockSize");
  b.Check(dk == q.dims[2], kParamInvalid, "key head dim differs from query's");
  b.Check(paged || kv_values.empty() || kv_values.back() == seq, kTilingError,
          "the last actualSeqLengthsKv value must equal the key tokens " +
              std::to_string(seq));
  // sparseMode 0: no mask. 3: rightDownCausal. 4: band. Both need the
  // 2048x2048 compressed mask.
  b.Check(sparseMode == 0 || sparseMode == 3 || sparseMode == 4, kParamInvalid,
          "sparseMode " + std::to_string(sparseMode) +
              ": the double implements 0, 3 and 4");
  const TensorView& m = b.V(sm);
  if (sparseMode == 0) {
    b.Check(!m.present, kParamInvalid,
            "sparseMode 0 with an attenMask is not implemented by the double");
  } else {
    b.Check(m.present && m.Dim() == 2 && m.dims[0] == kMaskSize &&
                m.dims[1] == kMaskSize &&
                (m.dtype == kBool || m.dtype == kInt8 || m.dtype == kUint8),
            kParamInvalid,
            "sparseMode 3/4 need a 2048x2048 BOOL/INT8/UINT8 attenMask");
  }
  const TensorView& out = b.V(so);
  b.Check(out.dims == Dims({tokens, numHeads, dv}) && out.dtype == q.dtype,
          kParamInvalid, "attentionOut must be [T, N, Dv] with query's dtype");
  if (softmaxLseFlag) {
    b.Check(b.V(sl).present && b.V(sl).dtype == kFloat &&
                b.V(sl).dims == Dims({tokens, numHeads, 1}),
            kParamInvalid,
            "softmaxLseFlag needs a FLOAT softmaxLse of shape [T, N, 1]");
  }
  const int64_t group = numHeads / kv_heads;
  const bool write_lse = softmaxLseFlag;
  return b.Launch(kAttentionWorkspace, [=](const std::vector<TensorView>& v) {
    int status = kSuccess;
    if (sparseMode != 0 && !IsCausalMask(v[sm])) {
      return Fault(&status,
                   "aclnnFusedInferAttentionScoreV3: attenMask is not the "
                   "2048x2048 triu(diagonal=1) mask (1 = masked)");
    }
    const TensorView& qv = v[sq];
    const TensorView& ov = v[so];
    std::vector<KeyRef> keys;
    for (int64_t r = 0; r < batch; ++r) {
      const int64_t q_begin = r == 0 ? 0 : q_ends[r - 1];
      const int64_t q_len = q_ends[r] - q_begin;
      int64_t kv_len;
      if (paged) {
        kv_len = kv_values[r];
        std::string why;
        if (!PagedKeys(v[sbt], r, kv_len, blockSize, num_blocks, &keys, &why)) {
          Fault(&status, "aclnnFusedInferAttentionScoreV3: " + why);
          continue;
        }
      } else {
        const int64_t kv_begin = r == 0 ? 0 : kv_values[r - 1];
        kv_len = kv_values[r] - kv_begin;
        keys.resize(kv_len);
        for (int64_t j = 0; j < kv_len; ++j) keys[j] = {kv_begin + j, 0};
      }
      for (int64_t i = 0; i < q_len; ++i) {
        const int64_t t = q_begin + i;
        // Bottom-right aligned: query i sits on key diag = i + kv_len - q_len.
        // Band (sparseMode 4): keys [diag - preTokens, diag + nextTokens],
        // so preTokens counts the earlier keys visible besides the diagonal.
        const int64_t diag = i + kv_len - q_len;
        int64_t lo = 0, hi = kv_len - 1;
        if (sparseMode == 3) hi = diag;
        if (sparseMode == 4) lo = diag - preTokens, hi = diag + nextTokens;
        AttendToken(
            qv,
            [&](int64_t h, int64_t d) {
              return qv.offset + t * qv.strides[0] + h * qv.strides[1] +
                     d * qv.strides[2];
            },
            ov,
            [&](int64_t h, int64_t d) {
              return ov.offset + t * ov.strides[0] + h * ov.strides[1] +
                     d * ov.strides[2];
            },
            write_lse ? &v[sl] : nullptr,
            [&](int64_t h) {
              return v[sl].offset + t * v[sl].strides[0] + h * v[sl].strides[1];
            },
            v[sk], v[sv], layout, keys, lo, hi, numHeads, group, dk, dv,
            scaleValue);
      }
    }
    return status;
  });
}
DOUBLE_PHASE2(FusedInferAttentionScoreV3)

// ---- aclnnIncreFlashAttentionV4 (decode)
// ---------------------------------------------

DOUBLE_API aclnnStatus aclnnIncreFlashAttentionV4GetWorkspaceSize(
    const aclTensor* query, const aclTensorList* key,
    const aclTensorList* value, const aclTensor* pseShift,
    const aclTensor* attenMask, const aclIntArray* actualSeqLengths,
    const aclTensor* dequantScale1, const aclTensor* quantScale1,
    const aclTensor* dequantScale2, const aclTensor* quantScale2,
    const aclTensor* quantOffset2, const aclTensor* antiquantScale,
    const aclTensor* antiquantOffset, const aclTensor* blocktable,
    const aclTensor* kvPaddingSize, int64_t numHeads, double scaleValue,
    char* inputLayout, int64_t numKeyValueHeads, int64_t blockSize,
    int64_t innerPrecise, const aclTensor* attentionOut,
    uint64_t* workspaceSize, aclOpExecutor** executor) {
  (void)innerPrecise;
  OpBuilder b("aclnnIncreFlashAttentionV4", workspaceSize, executor);
  int sq, sk, sv;
  AttentionInputs(b, query, key, value, &sq, &sk, &sv);
  b.OptIn(pseShift, "pseShift");
  b.OptIn(attenMask, "attenMask");
  RequireNull(b, "decode without masks or quantization",
              {{pseShift, "pseShift"},
               {attenMask, "attenMask"},
               {dequantScale1, "dequantScale1"},
               {quantScale1, "quantScale1"},
               {dequantScale2, "dequantScale2"},
               {quantScale2, "quantScale2"},
               {quantOffset2, "quantOffset2"},
               {antiquantScale, "antiquantScale"},
               {antiquantOffset, "antiquantOffset"},
               {kvPaddingSize, "kvPaddingSize"}});
  const int sbt = b.OptIn(blocktable, "blocktable");
  const aclIntArray* lens =
      b.IntArray(actualSeqLengths, "actualSeqLengths", false);
  const int so = b.Out(attentionOut, "attentionOut");
  if (!b.ok()) return b.Launch(0, nullptr);
  const std::string layout_name = Text(inputLayout);
  const TensorView& q = b.V(sq);
  b.Check(
      layout_name == "BSH" || layout_name == "BSND" || layout_name == "BNSD",
      kParamInvalid,
      "inputLayout \"" + layout_name + "\" is not BSH, BSND or BNSD");
  b.Check(q.dtype == kFloat16 || q.dtype == kBf16, kParamInvalid,
          "query must be FLOAT16 or BF16");
  b.Check(q.Dim() == (layout_name == "BSH" ? 3 : 4), kParamInvalid,
          "query " + ShapeText(q.dims) + " does not match " + layout_name);
  if (!b.ok()) return b.Launch(0, nullptr);
  const int64_t batch = q.dims[0];
  const int64_t kv_heads = numKeyValueHeads == 0 ? numHeads : numKeyValueHeads;
  const int64_t seq_dim = layout_name == "BNSD" ? 2 : 1;
  b.Check(q.dims[seq_dim] == 1, kParamInvalid,
          "decode takes one query token per request");
  const int64_t head_dim = layout_name == "BSH"
                               ? (numHeads > 0 ? q.dims[2] / numHeads : 0)
                               : q.dims[3];
  b.Check(
      numHeads > 0 && (layout_name == "BSH" ? q.dims[2] == numHeads * head_dim
                                            : q.dims[3 - seq_dim] == numHeads),
      kParamInvalid, "numHeads does not match query");
  b.Check(kv_heads > 0 && numHeads % kv_heads == 0, kParamInvalid,
          "numHeads % numKeyValueHeads must be 0");
  const TensorView& k = b.V(sk);
  const TensorView& vv = b.V(sv);
  b.Check(k.dtype == q.dtype && vv.dtype == q.dtype, kParamInvalid,
          "key/value must have the query dtype");
  if (!b.ok()) return b.Launch(0, nullptr);
  const bool paged = b.V(sbt).present;
  KvLayout layout;
  if (paged) {
    layout = k.Dim() == 4 ? KvLayout::kBnsd : KvLayout::kBsh;
  } else {
    layout = layout_name == "BSH"    ? KvLayout::kBsh
             : layout_name == "BNSD" ? KvLayout::kBnsd
                                     : KvLayout::kBsnd;
  }
  int64_t dk = 0, dv = 0, seq = 0, value_seq = 0;
  b.Check(KvShape(k, layout, kv_heads, &dk, &seq) &&
              KvShape(vv, layout, kv_heads, &dv, &value_seq) &&
              seq == value_seq && dk == head_dim && dv == head_dim,
          kParamInvalid,
          "key " + ShapeText(k.dims) + " / value " + ShapeText(vv.dims) +
              " do not fit the layout");
  if (!b.ok()) return b.Launch(0, nullptr);
  std::vector<int64_t> kv_lens;
  if (lens != nullptr) kv_lens = lens->values;
  int64_t num_blocks = 0;
  if (paged) {
    const TensorView& bt = b.V(sbt);
    b.Check(bt.dtype == kInt32 && bt.Dim() == 2 && bt.dims[0] == batch,
            kParamInvalid, "blocktable must be INT32 [B, maxBlocks]");
    b.Check(blockSize > 0 && blockSize <= 512 && seq == blockSize,
            kParamInvalid, "blockSize must be in [1, 512] and match the cache");
    b.Check(static_cast<int64_t>(kv_lens.size()) == batch, kParamInvalid,
            "paged decode needs one actualSeqLengths entry per request");
    if (!b.ok()) return b.Launch(0, nullptr);
    for (int64_t len : kv_lens) {
      b.Check(len >= 0 && len <= bt.dims[1] * blockSize, kParamInvalid,
              "a kv length exceeds blocktable width * blockSize");
    }
    num_blocks = k.dims[0];
  } else {
    b.Check(k.dims[0] == batch, kParamInvalid,
            "key batch differs from query batch");
    if (kv_lens.empty()) kv_lens.assign(batch, seq);
    b.Check(static_cast<int64_t>(kv_lens.size()) == batch, kParamInvalid,
            "actualSeqLengths needs one entry per request");
    for (int64_t len : kv_lens) {
      b.Check(len >= 0 && len <= seq, kParamInvalid,
              "a kv length exceeds the key sequence");
    }
  }
  b.Check(b.V(so).dims == q.dims && b.V(so).dtype == q.dtype, kParamInvalid,
          "attentionOut must match query");
  const int64_t group = numHeads / kv_heads;
  const bool bsh = layout_name == "BSH";
  return b.Launch(kAttentionWorkspace, [=](const std::vector<TensorView>& v) {
    int status = kSuccess;
    const TensorView& qv = v[sq];
    const TensorView& ov = v[so];
    // Element offset of (request, head, dim) in query-shaped tensors.
    auto at = [&](const TensorView& t, int64_t r, int64_t h, int64_t d) {
      if (bsh)
        return t.offset + r * t.strides[0] + (h * head_dim + d) * t.strides[2];
      return t.offset + r * t.strides[0] + h * t.strides[3 - seq_dim] +
             d * t.strides[3];
    };
    std::vector<KeyRef> keys;
    for (int64_t r = 0; r < batch; ++r) {
      if (paged) {
        std::string why;
        if (!PagedKeys(v[sbt], r, kv_lens[r], blockSize, num_blocks, &keys,
                       &why)) {
          Fault(&status, "aclnnIncreFlashAttentionV4: " + why);
          continue;
        }
      } else {
        keys.resize(kv_lens[r]);
        for (int64_t j = 0; j < kv_lens[r]; ++j) keys[j] = {r, j};
      }
      AttendToken(
          qv, [&](int64_t h, int64_t d) { return at(qv, r, h, d); }, ov,
          [&](int64_t h, int64_t d) { return at(ov, r, h, d); }, nullptr,
          [](int64_t) { return int64_t{0}; }, v[sk], v[sv], layout, keys, 0,
          kv_lens[r] - 1, numHeads, group, head_dim, head_dim, scaleValue);
    }
    return status;
  });
}
DOUBLE_PHASE2(IncreFlashAttentionV4)
