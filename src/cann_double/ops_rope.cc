// libopapi.so of the CANN test double: the rotary embeddings
// (RopeWithSinCosCache, ApplyRotaryPosEmbV2; prototypes:
// docs/backends/ascend.md, "CANN sources and traps"). One file per op family,
// so an op is found by its family.
//
// Positions are device data, read only inside the queued computation; an
// out-of-range value there is a run-time fault reported by the synchronizing
// call (507899), as a kernel exception is on the NPU. Host arrays
// (aclIntArray) are read in phase 1.
#include <string>
#include <utility>
#include <vector>

#include "kernels.h"

using namespace cann_double;  // NOLINT: the C entry points below

namespace {

// Rotates one head in place: x[i] * cos + partner * sin over rotary_dim
// elements; neox pairs (i, i + rot/2), interleaved pairs (2i, 2i + 1).
void RotateHead(double* x, const double* cos, const double* sin,
                int64_t rotary_dim, bool neox) {
  const int64_t half = rotary_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const int64_t i1 = neox ? i : 2 * i;
    const int64_t i2 = neox ? i + half : 2 * i + 1;
    const double x1 = x[i1];
    const double x2 = x[i2];
    x[i1] = x1 * cos[i] - x2 * sin[i];
    x[i2] = x2 * cos[i] + x1 * sin[i];
  }
}

}  // namespace

// ---- aclnnRopeWithSinCosCache
// -----------------------------------------------------

DOUBLE_API aclnnStatus aclnnRopeWithSinCosCacheGetWorkspaceSize(
    const aclTensor* positions, const aclTensor* queryIn,
    const aclTensor* keyIn, const aclTensor* cosSinCache,
    const aclIntArray* mropeSection, int64_t headSize, bool isNeoxStyle,
    aclTensor* queryOut, aclTensor* keyOut, uint64_t* workspaceSize,
    aclOpExecutor** executor) {
  OpBuilder b("aclnnRopeWithSinCosCache", workspaceSize, executor);
  const int sp = b.In(positions, "positions");
  const int sq = b.In(queryIn, "queryIn");
  const int sk = b.In(keyIn, "keyIn");
  const int sc = b.In(cosSinCache, "cosSinCache");
  const aclIntArray* mrope = b.IntArray(mropeSection, "mropeSection", false);
  const int oq = b.Out(queryOut, "queryOut");
  const int ok = b.Out(keyOut, "keyOut");
  if (!b.ok()) return b.Launch(0, nullptr);
  const TensorView& q = b.V(sq);
  const TensorView& k = b.V(sk);
  const TensorView& c = b.V(sc);
  bool plain = true;
  if (mrope != nullptr) {
    for (int64_t x : mrope->values) plain = plain && x == 0;
  }
  b.Check(plain, kParamInvalid,
          "mropeSection with nonzero sections (M-RoPE) is not implemented by "
          "the double");
  b.Check(b.V(sp).dtype == kInt64 && b.V(sp).Dim() == 1, kParamInvalid,
          "positions must be a 1-D INT64 tensor");
  b.Check(q.Dim() == 2 && k.Dim() == 2, kParamInvalid,
          "queryIn and keyIn must be 2-D [T, N*headSize]");
  b.Check(c.Dim() == 2, kParamInvalid, "cosSinCache must be 2-D");
  if (!b.ok()) return b.Launch(0, nullptr);
  const int64_t tokens = b.V(sp).dims[0];
  b.Check(q.dims[0] == tokens && k.dims[0] == tokens, kParamInvalid,
          "queryIn/keyIn rows must equal the number of positions");
  b.Check(IsHalfOrFloat(q.dtype) && k.dtype == q.dtype && c.dtype == q.dtype,
          kParamInvalid,
          "queryIn, keyIn and cosSinCache must share FLOAT16, BF16 or FLOAT");
  const int64_t rotary_dim = c.dims[1];
  const int64_t multiple = q.dtype == kFloat ? 16 : 32;
  b.Check(headSize > 0 && headSize % multiple == 0 &&
              rotary_dim % multiple == 0 && rotary_dim > 0 &&
              rotary_dim <= headSize,
          kParamInvalid,
          "headSize " + std::to_string(headSize) + " and rotaryDim " +
              std::to_string(rotary_dim) + " must be multiples of " +
              std::to_string(multiple) + " for " + DtypeName(q.dtype) +
              ", rotaryDim <= headSize");
  if (!b.ok()) return b.Launch(0, nullptr);
  b.Check(q.dims[1] % headSize == 0 && k.dims[1] % headSize == 0, kParamInvalid,
          "queryIn/keyIn widths must be multiples of headSize");
  b.Check(b.V(oq).dims == q.dims && b.V(oq).dtype == q.dtype &&
              b.V(ok).dims == k.dims && b.V(ok).dtype == k.dtype,
          kParamInvalid, "queryOut/keyOut must match queryIn/keyIn");
  const int64_t max_positions = c.dims[0];
  return b.Launch(
      kElementwiseWorkspace * 2, [=](const std::vector<TensorView>& v) {
        int status = kSuccess;
        std::vector<double> head(headSize), cos(rotary_dim / 2),
            sin(rotary_dim / 2);
        for (int64_t t = 0; t < tokens; ++t) {
          const int64_t pos =
              LoadInt(v[sp], v[sp].offset + t * v[sp].strides[0]);
          if (pos < 0 || pos >= max_positions) {
            Fault(&status, "aclnnRopeWithSinCosCache: position " +
                               std::to_string(pos) + " outside the " +
                               std::to_string(max_positions) + "-row cache");
            continue;
          }
          const TensorView& cache = v[sc];
          for (int64_t i = 0; i < rotary_dim / 2; ++i) {
            const int64_t row = cache.offset + pos * cache.strides[0];
            cos[i] = LoadDouble(cache, row + i * cache.strides[1]);
            sin[i] = LoadDouble(cache,
                                row + (i + rotary_dim / 2) * cache.strides[1]);
          }
          for (const auto& [in, out] :
               {std::pair<int, int>{sq, oq}, {sk, ok}}) {
            const TensorView& x = v[in];
            const TensorView& y = v[out];
            for (int64_t h = 0; h < x.dims[1] / headSize; ++h) {
              for (int64_t i = 0; i < headSize; ++i) {
                head[i] = LoadDouble(x, x.offset + t * x.strides[0] +
                                            (h * headSize + i) * x.strides[1]);
              }
              // Dims past rotaryDim pass through unchanged (partial rotary).
              RotateHead(head.data(), cos.data(), sin.data(), rotary_dim,
                         isNeoxStyle);
              for (int64_t i = 0; i < headSize; ++i) {
                StoreDouble(y,
                            y.offset + t * y.strides[0] +
                                (h * headSize + i) * y.strides[1],
                            head[i]);
              }
            }
          }
        }
        return status;
      });
}
DOUBLE_PHASE2(RopeWithSinCosCache)

// ---- aclnnApplyRotaryPosEmbV2
// ---------------------------------------------------

DOUBLE_API aclnnStatus aclnnApplyRotaryPosEmbV2GetWorkspaceSize(
    aclTensor* queryRef, aclTensor* keyRef, const aclTensor* cos,
    const aclTensor* sin, int64_t layout, char* rotaryMode,
    uint64_t* workspaceSize, aclOpExecutor** executor) {
  OpBuilder b("aclnnApplyRotaryPosEmbV2", workspaceSize, executor);
  const int sq = b.Ref(queryRef, "queryRef");
  const int sk = b.Ref(keyRef, "keyRef");
  const int sc = b.In(cos, "cos");
  const int ss = b.In(sin, "sin");
  if (!b.ok()) return b.Launch(0, nullptr);
  const std::string mode = rotaryMode == nullptr ? "half" : rotaryMode;
  b.Check(mode == "half" || mode == "interleave", kParamInvalid,
          "rotaryMode \"" + mode +
              "\": the double implements \"half\" and \"interleave\"");
  b.Check(layout >= 1 && layout <= 4, kParamInvalid,
          "layout " + std::to_string(layout) +
              " is not 1 (BSND), 2 (SBND), 3 (BNSD) or 4 (TND)");
  const TensorView& q = b.V(sq);
  const TensorView& k = b.V(sk);
  const int64_t ndim = layout == 4 ? 3 : 4;
  b.Check(q.Dim() == ndim && k.Dim() == ndim && b.V(sc).Dim() == ndim &&
              b.V(ss).Dim() == ndim,
          kParamInvalid,
          "layout " + std::to_string(layout) + " needs " +
              std::to_string(ndim) + "-D query, key, cos and sin");
  if (!b.ok()) return b.Launch(0, nullptr);
  const int64_t head_dim = q.dims.back();
  // The A2 table of the doc lists D = 128 only.
  b.Check(head_dim == 128 && k.dims.back() == 128, kParamInvalid,
          "head dim must be 128 on Atlas A2 (got " + std::to_string(head_dim) +
              ")");
  b.Check(IsHalfOrFloat(q.dtype) && k.dtype == q.dtype &&
              b.V(sc).dtype == q.dtype && b.V(ss).dtype == q.dtype,
          kParamInvalid, "query, key, cos and sin must share one float dtype");
  b.Check(b.V(sc).dims == b.V(ss).dims && BroadcastsTo(b.V(sc).dims, q.dims) &&
              BroadcastsTo(b.V(sc).dims, k.dims),
          kParamInvalid,
          "cos/sin " + ShapeText(b.V(sc).dims) + " must broadcast to query " +
              ShapeText(q.dims) + " and key " + ShapeText(k.dims));
  const bool neox = mode == "half";
  return b.Launch(
      kElementwiseWorkspace * 2, [=](const std::vector<TensorView>& v) {
        for (int slot : {sq, sk}) {
          const TensorView& x = v[slot];
          const auto ox = Offsets(x);
          const auto oc = BroadcastOffsets(v[sc], x.dims);
          const auto os = BroadcastOffsets(v[ss], x.dims);
          std::vector<double> row(head_dim);
          for (size_t r = 0; r < ox.size(); r += head_dim) {
            for (int64_t i = 0; i < head_dim; ++i) {
              row[i] = LoadDouble(x, ox[r + i]);
            }
            for (int64_t i = 0; i < head_dim; ++i) {
              // rotate_half: (-x2, x1); interleave: (-x[2i+1], x[2i]).
              const int64_t half = head_dim / 2;
              const int64_t partner =
                  neox ? (i < half ? i + half : i - half) : i ^ 1;
              const double sign =
                  neox ? (i < half ? -1 : 1) : (i % 2 == 0 ? -1 : 1);
              StoreDouble(
                  x, ox[r + i],
                  row[i] * LoadDouble(v[sc], oc[r + i]) +
                      sign * row[partner] * LoadDouble(v[ss], os[r + i]));
            }
          }
        }
        return kSuccess;
      });
}
DOUBLE_PHASE2(ApplyRotaryPosEmbV2)
