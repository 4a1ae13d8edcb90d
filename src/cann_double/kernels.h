// Shape and iteration helpers of the aclnn ops in the CANN test double.
//
// The ops are plain loops over element offsets: the double is a correctness
// oracle, not a fast path. All arithmetic is double precision with one
// rounding to the output dtype.
#ifndef POLYOPS_CANN_DOUBLE_KERNELS_H_
#define POLYOPS_CANN_DOUBLE_KERNELS_H_

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "nnopbase.h"
#include "numeric.h"

namespace cann_double {

using Dims = std::vector<int64_t>;

inline std::string ShapeText(const Dims& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

inline int64_t Product(const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// dim in [-ndim, ndim) -> [0, ndim); -1 if out of range.
inline int64_t NormalizeDim(int64_t dim, int64_t ndim) {
  if (dim < -ndim || dim >= ndim) return -1;
  return dim < 0 ? dim + ndim : dim;
}

// Broadcast shape of a and b (numpy rules); false if incompatible.
inline bool BroadcastShape(const Dims& a, const Dims& b, Dims* out) {
  const size_t n = std::max(a.size(), b.size());
  out->assign(n, 1);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1) return false;
    (*out)[i] = da == 1 ? db : da;
  }
  return true;
}

// True if `from` broadcasts to exactly `to`.
inline bool BroadcastsTo(const Dims& from, const Dims& to) {
  Dims out;
  return BroadcastShape(from, to, &out) && out == to;
}

// Element offsets (from t.data, offset included) of t broadcast to dims, in
// row-major order of dims. t must broadcast to dims.
inline std::vector<int64_t> BroadcastOffsets(const TensorView& t,
                                             const Dims& dims) {
  const size_t n = dims.size();
  std::vector<int64_t> strides(n, 0);
  for (size_t i = 0; i < t.dims.size(); ++i) {
    const size_t j = n - t.dims.size() + i;
    strides[j] = t.dims[i] == 1 ? 0 : t.strides[i];
  }
  const int64_t total = Product(dims);
  std::vector<int64_t> offsets(total > 0 ? total : 0);
  std::vector<int64_t> index(n, 0);
  int64_t current = t.offset;
  for (int64_t e = 0; e < total; ++e) {
    offsets[e] = current;
    for (int64_t d = static_cast<int64_t>(n) - 1; d >= 0; --d) {
      if (++index[d] < dims[d]) {
        current += strides[d];
        break;
      }
      current -= strides[d] * (dims[d] - 1);
      index[d] = 0;
    }
  }
  return offsets;
}

inline std::vector<int64_t> Offsets(const TensorView& t) {
  return BroadcastOffsets(t, t.dims);
}

// The view of dims [begin, end) of t (offset kept only when begin == 0).
inline TensorView SubView(const TensorView& t, size_t begin, size_t end) {
  TensorView s = t;
  s.dims.assign(t.dims.begin() + begin, t.dims.begin() + end);
  s.strides.assign(t.strides.begin() + begin, t.strides.begin() + end);
  if (begin > 0) s.offset = 0;
  return s;
}

// v rounded to dtype (what a store followed by a load gives).
inline double RoundTo(int32_t dtype, double v) {
  alignas(8) unsigned char buffer[8] = {};
  TensorView t;
  t.dtype = dtype;
  t.data = buffer;
  StoreDouble(t, 0, v);
  return LoadDouble(t, 0);
}

// Copies one element, exactly for integer to integer.
inline void CopyElement(const TensorView& dst, int64_t dst_offset,
                        const TensorView& src, int64_t src_offset) {
  if (!IsFloating(dst.dtype) && !IsFloating(src.dtype) && src.dtype != kBool) {
    StoreInt(dst, dst_offset, LoadInt(src, src_offset));
  } else {
    StoreDouble(dst, dst_offset, LoadDouble(src, src_offset));
  }
}

inline double ScalarValue(const aclScalar* s) {
  return IsFloating(s->dtype) ? s->value : static_cast<double>(s->int_value);
}

// torch-style promotion: floating beats integral beats bool; two floating
// dtypes of equal size but different kind (float16, bf16) give float32.
inline int32_t PromoteTypes(int32_t a, int32_t b) {
  if (a == b) return a;
  const bool fa = IsFloating(a);
  const bool fb = IsFloating(b);
  if (fa && fb) {
    if (a == kDouble || b == kDouble) return kDouble;
    return kFloat;  // float32 with any half type, or float16 with bf16
  }
  if (fa) return a;
  if (fb) return b;
  if (a == kBool) return b;
  if (b == kBool) return a;
  if (ItemSize(a) != ItemSize(b)) return ItemSize(a) > ItemSize(b) ? a : b;
  return kInt64;  // mixed signedness of one size: a wider signed type
}

// Whether a result of dtype `from` may be written to dtype `to` (torch's
// can_cast: no floating -> integral, no non-bool -> bool).
inline bool CanCast(int32_t from, int32_t to) {
  if (IsFloating(from) && !IsFloating(to)) return false;
  if (from != kBool && to == kBool) return false;
  return true;
}

inline bool IsHalfOrFloat(int32_t d) {
  return d == kFloat || d == kFloat16 || d == kBf16;
}

constexpr double kInf = std::numeric_limits<double>::infinity();

// String attributes may be NULL, which the ops read as "".
inline std::string Text(const char* s) { return s == nullptr ? "" : s; }

// Run-time fault of queued work: the first one wins, later elements still
// run.
inline int Fault(int* status, const std::string& message) {
  if (*status == kSuccess) *status = SetError(kRtInternalError, message);
  return *status;
}

// Workspace sizes the double asks for: nonzero, so that a missing or
// too-small workspace is caught, and op-dependent.
constexpr uint64_t kElementwiseWorkspace = 2048;
constexpr uint64_t kReductionWorkspace = 8192;
constexpr uint64_t kMatmulWorkspace = 16384;
constexpr uint64_t kAttentionWorkspace = 65536;

}  // namespace cann_double

// Phase 2 of an op is the shared launcher.
#define DOUBLE_PHASE2(Name)                                                   \
  DOUBLE_API aclnnStatus aclnn##Name(void* workspace, uint64_t workspaceSize, \
                                     aclOpExecutor* executor,                 \
                                     aclrtStream stream) {                    \
    return cann_double::RunPhase2("aclnn" #Name, workspace, workspaceSize,    \
                                  executor, stream);                          \
  }

#endif  // POLYOPS_CANN_DOUBLE_KERNELS_H_
