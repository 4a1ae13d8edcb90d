// libopapi.so of the CANN test double: writing the paged KV cache
// (ScatterPaKvCache; prototype: docs/backends/ascend.md, "CANN sources and
// traps"). One file per op family, so an op is found by its family.
//
// Slot mappings are device data, read only inside the queued computation; an
// out-of-range value there is a run-time fault reported by the synchronizing
// call (507899), as a kernel exception is on the NPU. Host arrays
// (aclIntArray) are read in phase 1.
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "kernels.h"

using namespace cann_double;  // NOLINT: the C entry points below

namespace {

bool IsInt32Or64(int32_t dtype) { return dtype == kInt32 || dtype == kInt64; }

}  // namespace

// ---- aclnnScatterPaKvCache (8.3.RC1 / 8.5.0 prototype)
// -----------------------------

DOUBLE_API aclnnStatus aclnnScatterPaKvCacheGetWorkspaceSize(
    const aclTensor* key, aclTensor* keyCacheRef, const aclTensor* slotMapping,
    const aclTensor* value, aclTensor* valueCacheRef,
    const aclTensor* compressLensOptional,
    const aclTensor* compressSeqOffsetOptional,
    const aclTensor* seqLensOptional, char* cacheModeOptional,
    char* scatterModeOptional, const aclIntArray* stridesOptional,
    const aclIntArray* offsetsOptional, uint64_t* workspaceSize,
    aclOpExecutor** executor) {
  OpBuilder b("aclnnScatterPaKvCache", workspaceSize, executor);
  const int sk = b.In(key, "key");
  const int skc = b.Ref(keyCacheRef, "keyCacheRef");
  const int ss = b.In(slotMapping, "slotMapping");
  const int sv = b.In(value, "value");
  const int svc = b.Ref(valueCacheRef, "valueCacheRef");
  const int c1 = b.OptIn(compressLensOptional, "compressLensOptional");
  const int c2 =
      b.OptIn(compressSeqOffsetOptional, "compressSeqOffsetOptional");
  const int c3 = b.OptIn(seqLensOptional, "seqLensOptional");
  const aclIntArray* strides =
      b.IntArray(stridesOptional, "stridesOptional", false);
  const aclIntArray* offsets =
      b.IntArray(offsetsOptional, "offsetsOptional", false);
  if (!b.ok()) return b.Launch(0, nullptr);
  b.Check(!b.V(c1).present && !b.V(c2).present && !b.V(c3).present,
          kParamInvalid,
          "the compress scenarios (compressLens, compressSeqOffset, seqLens) "
          "are not implemented by the double");
  const std::string cache_mode = Text(cacheModeOptional);
  const std::string scatter_mode = Text(scatterModeOptional);
  b.Check(cache_mode.empty() || cache_mode == "Norm", kParamInvalid,
          "cacheMode \"" + cache_mode + "\": the double implements \"Norm\"");
  b.Check(
      scatter_mode.empty() || scatter_mode == "None", kParamInvalid,
      "scatterMode \"" + scatter_mode + "\": the double implements \"None\"");
  b.Check(strides == nullptr || strides->values == std::vector<int64_t>{1, 1},
          kParamInvalid, "stridesOptional must be {1, 1} (or NULL)");
  b.Check(offsets == nullptr || offsets->values == std::vector<int64_t>{0, 0},
          kParamInvalid, "offsetsOptional must be {0, 0} (or NULL)");
  const TensorView& k = b.V(sk);
  const TensorView& kc = b.V(skc);
  const TensorView& vv = b.V(sv);
  const TensorView& vc = b.V(svc);
  const TensorView& slots = b.V(ss);
  for (int32_t dtype : {k.dtype, vv.dtype}) {
    b.Check(dtype == kFloat16 || dtype == kBf16 || dtype == kInt8,
            kParamInvalid,
            "key/value dtype " + DtypeName(dtype) +
                " is not FLOAT16, BF16 or INT8 (Atlas A2/A3)");
  }
  b.Check(kc.dtype == k.dtype && vc.dtype == vv.dtype, kParamInvalid,
          "caches must have the dtype of key/value");
  b.Check(IsInt32Or64(slots.dtype) && slots.Dim() == 1, kParamInvalid,
          "slotMapping must be a 1-D INT32 or INT64 tensor");
  b.Check(k.Dim() == 3 && vv.Dim() == 3 && kc.Dim() == 4 && vc.Dim() == 4,
          kParamInvalid,
          "key/value must be [T, Nkv, D], caches [blocks, blockSize, Nkv, D]");
  if (!b.ok()) return b.Launch(0, nullptr);
  b.Check(k.dims[0] == slots.dims[0] && vv.dims[0] == slots.dims[0] &&
              kc.dims[2] == k.dims[1] && kc.dims[3] == k.dims[2] &&
              vc.dims[2] == vv.dims[1] && vc.dims[3] == vv.dims[2] &&
              kc.dims[0] == vc.dims[0] && kc.dims[1] == vc.dims[1],
          kParamInvalid,
          "shapes do not match: key " + ShapeText(k.dims) + ", keyCache " +
              ShapeText(kc.dims) + ", value " + ShapeText(vv.dims) +
              ", valueCache " + ShapeText(vc.dims) + ", slotMapping " +
              ShapeText(slots.dims));
  for (const TensorView* t : {&k, &kc, &vv, &vc, &slots}) {
    b.Check(t->IsContiguous(), kParamInvalid,
            "inputs must be contiguous (got strides of " + ShapeText(t->dims) +
                " tensor that are not)");
  }
  const int64_t capacity = kc.dims[0] * kc.dims[1];
  return b.Launch(kElementwiseWorkspace, [=](const std::vector<TensorView>& v) {
    int status = kSuccess;
    const TensorView& map = v[ss];
    for (int64_t t = 0; t < map.dims[0]; ++t) {
      const int64_t slot = LoadInt(map, map.offset + t);
      if (slot == -1) continue;  // padding token: skipped
      if (slot < 0 || slot >= capacity) {
        Fault(&status, "aclnnScatterPaKvCache: slotMapping[" +
                           std::to_string(t) + "] = " + std::to_string(slot) +
                           " outside [0, " + std::to_string(capacity) + ")");
        continue;
      }
      for (const auto& [src, dst] : {std::pair<int, int>{sk, skc}, {sv, svc}}) {
        const int64_t row = v[src].dims[1] * v[src].dims[2];
        const size_t bytes = row * ItemSize(v[src].dtype);
        std::memcpy(ElementPtr(v[dst], v[dst].offset + slot * row),
                    ElementPtr(v[src], v[src].offset + t * row), bytes);
      }
    }
    return status;
  });
}
DOUBLE_PHASE2(ScatterPaKvCache)
