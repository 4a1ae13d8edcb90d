// libopapi.so of the CANN test double, part 3: sampling, aclnnApplyTopKTopP
// and the generic operators that polyops' topk_topp_sampling chains around it
// (NanToNum, Flip, Sort, Cumsum, Clamp, Rsubs, SearchSorted, Gather).
//
// Signatures are those of the ops-math / ops-nn headers and docs
// (docs/backends/ascend.md lists which ones were read and which are
// unverified). Like the other ops, each GetWorkspaceSize validates (161001
// NULL, 161002 dtype/shape/attribute) and captures its host parameters; data is
// read only in the queued computation.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "kernels.h"

using namespace cann_double;  // NOLINT: the C entry points below

namespace {

bool IsInteger(int32_t d) {
  return d == kInt8 || d == kUint8 || d == kInt16 || d == kInt32 || d == kInt64;
}

// The element offsets of the rows of t along dim d (t with dims[d] = 1).
std::vector<int64_t> LineStarts(const TensorView& t, int64_t d) {
  TensorView lines = t;
  lines.dims[d] = 1;
  return Offsets(lines);
}

bool SameShape(OpBuilder& b, const TensorView& out, const TensorView& self,
               const char* name) {
  return b.Check(out.dims == self.dims, kParamInvalid,
                 std::string(name) + " shape " + ShapeText(out.dims) +
                     " differs from self " + ShapeText(self.dims));
}

}  // namespace

// ---- aclnnApplyTopKTopP
// -------------------------------------------------------------

DOUBLE_API aclnnStatus aclnnApplyTopKTopPGetWorkspaceSize(
    const aclTensor* logits, const aclTensor* p, const aclTensor* k,
    aclTensor* out, uint64_t* workspaceSize, aclOpExecutor** executor) {
  OpBuilder b("aclnnApplyTopKTopP", workspaceSize, executor);
  const int sl = b.In(logits, "logits");
  const int sp = b.OptIn(p, "p");
  const int sk = b.OptIn(k, "k");
  const int so = b.Out(out, "out");
  if (!b.ok()) return b.Launch(0, nullptr);
  const TensorView& l = b.V(sl);
  b.Check(b.V(sp).present || b.V(sk).present, kNullptr,
          "p and k are both NULL");
  b.Check(IsHalfOrFloat(l.dtype) && l.Dim() == 2, kParamInvalid,
          "logits must be a 2-D FLOAT16, BF16 or FLOAT tensor");
  if (!b.ok()) return b.Launch(0, nullptr);
  const Dims batch{l.dims[0]};
  if (b.V(sp).present) {
    b.Check(b.V(sp).dtype == l.dtype && b.V(sp).dims == batch, kParamInvalid,
            "p must be [B] with logits' dtype");
  }
  if (b.V(sk).present) {
    b.Check(b.V(sk).dtype == kInt32 && b.V(sk).dims == batch, kParamInvalid,
            "k must be a [B] INT32 tensor");
  }
  b.Check(b.V(so).dims == l.dims && b.V(so).dtype == l.dtype, kParamInvalid,
          "out must match logits");
  return b.Launch(kReductionWorkspace, [=](const std::vector<TensorView>& v) {
    const TensorView& x = v[sl];
    const int64_t rows = x.dims[0];
    const int64_t vocab = x.dims[1];
    // p is device data documented in [0, 1]: a value outside (or NaN) is a
    // run-time fault here, since what the chip does with it is unknown.
    if (v[sp].present) {
      int status = kSuccess;
      for (int64_t r = 0; r < rows; ++r) {
        const double top_p =
            LoadDouble(v[sp], v[sp].offset + r * v[sp].strides[0]);
        if (!(top_p >= 0 && top_p <= 1)) {
          Fault(&status, "aclnnApplyTopKTopP: p[" + std::to_string(r) + "] = " +
                             std::to_string(top_p) + " is outside [0, 1]");
        }
      }
      if (status != kSuccess) return status;
    }
    std::vector<double> row(vocab);
    std::vector<int64_t> order(vocab);
    std::vector<char> masked(vocab);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < vocab; ++j) {
        row[j] = LoadDouble(x, x.offset + r * x.strides[0] + j * x.strides[1]);
      }
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t a, int64_t c) { return row[a] < row[c]; });
      std::fill(masked.begin(), masked.end(), 0);
      if (v[sk].present) {
        const int64_t top_k =
            LoadInt(v[sk], v[sk].offset + r * v[sk].strides[0]);
        if (top_k > 0 && top_k < vocab) {
          // Values below the k-th largest go; ties with it stay.
          const double threshold = row[order[vocab - top_k]];
          for (int64_t j = 0; j < vocab; ++j) masked[j] = row[j] < threshold;
        }
      }
      if (v[sp].present) {
        const double top_p =
            LoadDouble(v[sp], v[sp].offset + r * v[sp].strides[0]);
        double max = -kInf;
        for (int64_t j = 0; j < vocab; ++j) {
          if (!masked[j]) max = std::max(max, row[j]);
        }
        double total = 0;
        for (int64_t j = 0; j < vocab; ++j) {
          if (!masked[j]) total += std::exp(row[j] - max);
        }
        // Ascending cumulative probability; drop while <= 1 - p, but never
        // the largest logit.
        double cumulative = 0;
        for (int64_t s = 0; s < vocab - 1; ++s) {
          const int64_t j = order[s];
          if (!masked[j]) cumulative += std::exp(row[j] - max) / total;
          if (cumulative <= 1 - top_p) masked[j] = 1;
        }
      }
      const TensorView& y = v[so];
      for (int64_t j = 0; j < vocab; ++j) {
        StoreDouble(y, y.offset + r * y.strides[0] + j * y.strides[1],
                    masked[j] ? -kInf : row[j]);
      }
    }
    return kSuccess;
  });
}
DOUBLE_PHASE2(ApplyTopKTopP)

// ---- aclnnNanToNum
// ------------------------------------------------------------------
// out = self with NaN -> nan, +inf -> posinf, -inf -> neginf (the values
// rounded to out's dtype). Float dtypes only here (the doc also lists integer
// dtypes, where it is a copy); out has self's shape and dtype.
DOUBLE_API aclnnStatus aclnnNanToNumGetWorkspaceSize(
    const aclTensor* self, float nan, float posinf, float neginf,
    aclTensor* out, uint64_t* workspaceSize, aclOpExecutor** executor) {
  OpBuilder b("aclnnNanToNum", workspaceSize, executor);
  const int s = b.In(self, "self");
  const int o = b.Out(out, "out");
  if (!b.ok()) return b.Launch(0, nullptr);
  b.Check(IsHalfOrFloat(b.V(s).dtype), kParamInvalid,
          "self dtype " + DtypeName(b.V(s).dtype) +
              " is not FLOAT, FLOAT16 or BF16");
  b.Check(b.V(o).dtype == b.V(s).dtype, kParamInvalid,
          "out dtype " + DtypeName(b.V(o).dtype) + " is not self's " +
              DtypeName(b.V(s).dtype));
  SameShape(b, b.V(o), b.V(s), "out");
  return b.Launch(kElementwiseWorkspace, [=](const std::vector<TensorView>& v) {
    const auto os = Offsets(v[s]);
    const auto oo = Offsets(v[o]);
    for (size_t i = 0; i < oo.size(); ++i) {
      double x = LoadDouble(v[s], os[i]);
      if (std::isnan(x)) {
        x = nan;
      } else if (std::isinf(x)) {
        x = x > 0 ? posinf : neginf;
      }
      StoreDouble(v[o], oo[i], x);
    }
    return kSuccess;
  });
}
DOUBLE_PHASE2(NanToNum)

// ---- aclnnFlip
// ----------------------------------------------------------------------
// out(i) = self(j) with j_d = size_d - 1 - i_d for every d in dims (host
// array, each dim once, negative dims allowed). out: self's shape and dtype.
DOUBLE_API aclnnStatus aclnnFlipGetWorkspaceSize(const aclTensor* self,
                                                 const aclIntArray* dims,
                                                 aclTensor* out,
                                                 uint64_t* workspaceSize,
                                                 aclOpExecutor** executor) {
  OpBuilder b("aclnnFlip", workspaceSize, executor);
  const int s = b.In(self, "self");
  const aclIntArray* dim_array = b.IntArray(dims, "dims", true);
  const int o = b.Out(out, "out");
  if (!b.ok()) return b.Launch(0, nullptr);
  const int64_t ndim = b.V(s).Dim();
  std::vector<char> flip(ndim, 0);
  for (int64_t dim : dim_array->values) {
    const int64_t d = NormalizeDim(dim, ndim);
    if (!b.Check(d >= 0, kParamInvalid,
                 "dims entry " + std::to_string(dim) + " out of range")) {
      break;
    }
    b.Check(!flip[d], kParamInvalid,
            "dims names dim " + std::to_string(dim) + " twice");
    flip[d] = 1;
  }
  b.Check(b.V(o).dtype == b.V(s).dtype, kParamInvalid,
          "out dtype must be self's");
  SameShape(b, b.V(o), b.V(s), "out");
  return b.Launch(kElementwiseWorkspace, [=](const std::vector<TensorView>& v) {
    // The flipped view of self: start at the last element of each flipped
    // dim and walk it backwards (negative strides are fine on the host).
    TensorView flipped = v[s];
    for (int64_t d = 0; d < ndim; ++d) {
      if (!flip[d] || flipped.dims[d] == 0) continue;
      flipped.offset += (flipped.dims[d] - 1) * flipped.strides[d];
      flipped.strides[d] = -flipped.strides[d];
    }
    const auto os = Offsets(flipped);
    const auto oo = Offsets(v[o]);
    // out may not alias self on the chip either; stage to be safe.
    std::vector<double> values(os.size());
    std::vector<int64_t> ints(os.size());
    const bool integer = !IsFloating(v[s].dtype) && v[s].dtype != kBool;
    for (size_t i = 0; i < os.size(); ++i) {
      if (integer) {
        ints[i] = LoadInt(v[s], os[i]);
      } else {
        values[i] = LoadDouble(v[s], os[i]);
      }
    }
    for (size_t i = 0; i < oo.size(); ++i) {
      if (integer) {
        StoreInt(v[o], oo[i], ints[i]);
      } else {
        StoreDouble(v[o], oo[i], values[i]);
      }
    }
    return kSuccess;
  });
}
DOUBLE_PHASE2(Flip)

// ---- aclnnSort
// ----------------------------------------------------------------------
// Sorts along dim; valuesOut (self's shape and dtype) and indicesOut (INT64)
// get the sorted values and their positions. Dtypes of the 8.1 header:
// FLOAT16, FLOAT, INT8, INT16, INT32, INT64, UINT8 (BF16 is 161002 here).
// NaN sorts above +inf (torch's order); -0.0 and +0.0 are equal. With
// stable = true equal values keep their order; with stable = false the
// double reverses them, so a caller that relies on an unstable sort's tie
// order shows up.
DOUBLE_API aclnnStatus aclnnSortGetWorkspaceSize(
    const aclTensor* self, bool stable, int64_t dim, bool descending,
    aclTensor* valuesOut, aclTensor* indicesOut, uint64_t* workspaceSize,
    aclOpExecutor** executor) {
  OpBuilder b("aclnnSort", workspaceSize, executor);
  const int s = b.In(self, "self");
  const int ov = b.Out(valuesOut, "valuesOut");
  const int oi = b.Out(indicesOut, "indicesOut");
  if (!b.ok()) return b.Launch(0, nullptr);
  const int32_t dtype = b.V(s).dtype;
  b.Check(dtype == kFloat || dtype == kFloat16 || IsInteger(dtype),
          kParamInvalid,
          "self dtype " + DtypeName(dtype) +
              " is not FLOAT16, FLOAT, INT8, INT16, INT32, INT64 or UINT8");
  const int64_t d = NormalizeDim(dim, std::max<int64_t>(b.V(s).Dim(), 1));
  b.Check(d >= 0, kParamInvalid,
          "dim " + std::to_string(dim) + " out of range");
  b.Check(b.V(ov).dtype == dtype, kParamInvalid,
          "valuesOut dtype must be self's");
  SameShape(b, b.V(ov), b.V(s), "valuesOut");
  b.Check(b.V(oi).dtype == kInt64, kParamInvalid,
          "indicesOut dtype must be INT64, got " + DtypeName(b.V(oi).dtype));
  SameShape(b, b.V(oi), b.V(s), "indicesOut");
  if (!b.ok()) return b.Launch(0, nullptr);
  return b.Launch(kReductionWorkspace, [=](const std::vector<TensorView>& v) {
    if (v[s].Dim() == 0) {
      CopyElement(v[ov], v[ov].offset, v[s], v[s].offset);
      StoreInt(v[oi], v[oi].offset, 0);
      return kSuccess;
    }
    const int64_t n = v[s].dims[d];
    const auto is = LineStarts(v[s], d);
    const auto vs = LineStarts(v[ov], d);
    const auto xs = LineStarts(v[oi], d);
    std::vector<double> row(n);
    std::vector<int64_t> ints(n);
    std::vector<int64_t> order(n);
    const bool integer = IsInteger(dtype);
    // Strict weak order by value: NaN is the largest.
    auto less = [&](int64_t a, int64_t c) {
      if (integer) return ints[a] < ints[c];
      if (std::isnan(row[c])) return !std::isnan(row[a]);
      if (std::isnan(row[a])) return false;
      return row[a] < row[c];
    };
    for (size_t r = 0; r < is.size(); ++r) {
      for (int64_t j = 0; j < n; ++j) {
        const int64_t at = is[r] + j * v[s].strides[d];
        if (integer) {
          ints[j] = LoadInt(v[s], at);
        } else {
          row[j] = LoadDouble(v[s], at);
        }
      }
      std::iota(order.begin(), order.end(), 0);
      if (!stable) std::reverse(order.begin(), order.end());
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t c) {
        return descending ? less(c, a) : less(a, c);
      });
      for (int64_t j = 0; j < n; ++j) {
        const int64_t from = is[r] + order[j] * v[s].strides[d];
        CopyElement(v[ov], vs[r] + j * v[ov].strides[d], v[s], from);
        StoreInt(v[oi], xs[r] + j * v[oi].strides[d], order[j]);
      }
    }
    return kSuccess;
  });
}
DOUBLE_PHASE2(Sort)

// ---- aclnnCumsum
// --------------------------------------------------------------------
// out = the inclusive running sum of self along dim, with out's dtype equal
// to `dtype`. Summed in double and rounded once per element (the chip's
// summation order and precision are unspecified).
DOUBLE_API aclnnStatus aclnnCumsumGetWorkspaceSize(const aclTensor* self,
                                                   int64_t dim, int32_t dtype,
                                                   aclTensor* out,
                                                   uint64_t* workspaceSize,
                                                   aclOpExecutor** executor) {
  OpBuilder b("aclnnCumsum", workspaceSize, executor);
  const int s = b.In(self, "self");
  const int o = b.Out(out, "out");
  if (!b.ok()) return b.Launch(0, nullptr);
  const int64_t d = NormalizeDim(dim, std::max<int64_t>(b.V(s).Dim(), 1));
  b.Check(d >= 0, kParamInvalid,
          "dim " + std::to_string(dim) + " out of range");
  b.Check(IsHalfOrFloat(b.V(s).dtype) || IsInteger(b.V(s).dtype), kParamInvalid,
          "self dtype " + DtypeName(b.V(s).dtype) + " is not supported");
  b.Check(b.V(o).dtype == dtype && ItemSize(dtype) != 0, kParamInvalid,
          "out dtype " + DtypeName(b.V(o).dtype) + " is not dtype " +
              DtypeName(dtype));
  SameShape(b, b.V(o), b.V(s), "out");
  if (!b.ok()) return b.Launch(0, nullptr);
  return b.Launch(kReductionWorkspace, [=](const std::vector<TensorView>& v) {
    if (v[s].Dim() == 0) {
      CopyElement(v[o], v[o].offset, v[s], v[s].offset);
      return kSuccess;
    }
    const int64_t n = v[s].dims[d];
    const auto is = LineStarts(v[s], d);
    const auto os = LineStarts(v[o], d);
    for (size_t r = 0; r < is.size(); ++r) {
      double sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        sum += LoadDouble(v[s], is[r] + j * v[s].strides[d]);
        StoreDouble(v[o], os[r] + j * v[o].strides[d], sum);
      }
    }
    return kSuccess;
  });
}
DOUBLE_PHASE2(Cumsum)

// ---- aclnnClamp
// ---------------------------------------------------------------------
// out = min(max(self, min), max); either bound may be NULL, not both. NaN
// stays NaN (torch.clamp). Integer self with integer bounds is exact.
DOUBLE_API aclnnStatus aclnnClampGetWorkspaceSize(const aclTensor* self,
                                                  const aclScalar* clipValueMin,
                                                  const aclScalar* clipValueMax,
                                                  aclTensor* out,
                                                  uint64_t* workspaceSize,
                                                  aclOpExecutor** executor) {
  OpBuilder b("aclnnClamp", workspaceSize, executor);
  const int s = b.In(self, "self");
  const aclScalar* lo =
      clipValueMin ? b.Scalar(clipValueMin, "clipValueMin") : nullptr;
  const aclScalar* hi =
      clipValueMax ? b.Scalar(clipValueMax, "clipValueMax") : nullptr;
  const int o = b.Out(out, "out");
  if (!b.ok()) return b.Launch(0, nullptr);
  b.Check(lo != nullptr || hi != nullptr, kNullptr,
          "clipValueMin and clipValueMax are both NULL");
  const int32_t dtype = b.V(s).dtype;
  b.Check(IsHalfOrFloat(dtype) || IsInteger(dtype), kParamInvalid,
          "self dtype " + DtypeName(dtype) + " is not supported");
  b.Check(b.V(o).dtype == dtype, kParamInvalid, "out dtype must be self's");
  SameShape(b, b.V(o), b.V(s), "out");
  if (!b.ok()) return b.Launch(0, nullptr);
  const bool has_lo = lo != nullptr, has_hi = hi != nullptr;
  const double lo_value = has_lo ? ScalarValue(lo) : 0;
  const double hi_value = has_hi ? ScalarValue(hi) : 0;
  const bool exact = IsInteger(dtype) && (!has_lo || !IsFloating(lo->dtype)) &&
                     (!has_hi || !IsFloating(hi->dtype));
  const int64_t lo_int = has_lo ? lo->int_value : 0;
  const int64_t hi_int = has_hi ? hi->int_value : 0;
  return b.Launch(kElementwiseWorkspace, [=](const std::vector<TensorView>& v) {
    const auto os = Offsets(v[s]);
    const auto oo = Offsets(v[o]);
    for (size_t i = 0; i < oo.size(); ++i) {
      if (exact) {
        int64_t x = LoadInt(v[s], os[i]);
        if (has_lo) x = std::max(x, lo_int);
        if (has_hi) x = std::min(x, hi_int);
        StoreInt(v[o], oo[i], x);
        continue;
      }
      double x = LoadDouble(v[s], os[i]);
      if (!std::isnan(x)) {
        if (has_lo) x = std::max(x, lo_value);
        if (has_hi) x = std::min(x, hi_value);
      }
      StoreDouble(v[o], oo[i], x);
    }
    return kSuccess;
  });
}
DOUBLE_PHASE2(Clamp)

// ---- aclnnRsubs
// ---------------------------------------------------------------------
// out = other - alpha * self (scalars other and alpha). Integer self with
// integer scalars is exact (int64, wrapping like torch).
DOUBLE_API aclnnStatus aclnnRsubsGetWorkspaceSize(
    const aclTensor* self, const aclScalar* other, const aclScalar* alpha,
    aclTensor* out, uint64_t* workspaceSize, aclOpExecutor** executor) {
  OpBuilder b("aclnnRsubs", workspaceSize, executor);
  const int s = b.In(self, "self");
  const aclScalar* other_scalar = b.Scalar(other, "other");
  const aclScalar* alpha_scalar = b.Scalar(alpha, "alpha");
  const int o = b.Out(out, "out");
  if (!b.ok()) return b.Launch(0, nullptr);
  const int32_t dtype = b.V(s).dtype;
  b.Check(IsHalfOrFloat(dtype) || IsInteger(dtype), kParamInvalid,
          "self dtype " + DtypeName(dtype) + " is not supported");
  const bool exact = IsInteger(dtype) && !IsFloating(other_scalar->dtype) &&
                     !IsFloating(alpha_scalar->dtype);
  b.Check(exact || IsFloating(b.V(o).dtype), kParamInvalid,
          "a floating result cannot be written to out dtype " +
              DtypeName(b.V(o).dtype));
  SameShape(b, b.V(o), b.V(s), "out");
  if (!b.ok()) return b.Launch(0, nullptr);
  const double other_value = ScalarValue(other_scalar);
  const double alpha_value = ScalarValue(alpha_scalar);
  const auto other_int = static_cast<uint64_t>(other_scalar->int_value);
  const auto alpha_int = static_cast<uint64_t>(alpha_scalar->int_value);
  return b.Launch(kElementwiseWorkspace, [=](const std::vector<TensorView>& v) {
    const auto os = Offsets(v[s]);
    const auto oo = Offsets(v[o]);
    for (size_t i = 0; i < oo.size(); ++i) {
      if (exact) {
        const auto x = static_cast<uint64_t>(LoadInt(v[s], os[i]));
        StoreInt(v[o], oo[i], static_cast<int64_t>(other_int - alpha_int * x));
      } else {
        StoreDouble(v[o], oo[i],
                    other_value - alpha_value * LoadDouble(v[s], os[i]));
      }
    }
    return kSuccess;
  });
}
DOUBLE_PHASE2(Rsubs)

// ---- aclnnSearchSorted
// --------------------------------------------------------------
// out_i = the first j in [0, N] with seq_j >= x (right: seq_j > x), N when
// none, over the innermost dim of sortedSequence (N may be 0). When
// sortedSequence has more than one dim, self's leading dims must equal
// its. out: self's shape, INT32 iff outInt32 else INT64. A NaN value goes
// past every element (N), as in torch. `sorter` must be NULL here (161002):
// polyops never passes one.
DOUBLE_API aclnnStatus aclnnSearchSortedGetWorkspaceSize(
    const aclTensor* sortedSequence, const aclTensor* self, bool outInt32,
    bool right, const aclTensor* sorter, aclTensor* out,
    uint64_t* workspaceSize, aclOpExecutor** executor) {
  OpBuilder b("aclnnSearchSorted", workspaceSize, executor);
  const int q = b.In(sortedSequence, "sortedSequence");
  const int s = b.In(self, "self");
  const int so = b.OptIn(sorter, "sorter");
  const int o = b.Out(out, "out");
  if (!b.ok()) return b.Launch(0, nullptr);
  const TensorView& seq = b.V(q);
  const TensorView& values = b.V(s);
  auto supported = [](int32_t d) {
    return d == kDouble || d == kFloat || d == kFloat16 || IsInteger(d);
  };
  b.Check(supported(seq.dtype) && supported(values.dtype), kParamInvalid,
          "sortedSequence and self must be DOUBLE, FLOAT, FLOAT16, UINT8, "
          "INT8, INT16, INT32 or INT64");
  b.Check(!b.V(so).present, kParamInvalid,
          "sorter is not supported by the double");
  b.Check(seq.Dim() >= 1 && seq.Dim() <= 8 && values.Dim() <= 8, kParamInvalid,
          "sortedSequence must have 1 to 8 dims");
  if (!b.ok()) return b.Launch(0, nullptr);
  if (seq.Dim() > 1) {
    const Dims lead(seq.dims.begin(), seq.dims.end() - 1);
    const Dims self_lead =
        values.Dim() >= 1 ? Dims(values.dims.begin(), values.dims.end() - 1)
                          : Dims{};
    b.Check(values.Dim() == seq.Dim() && self_lead == lead, kParamInvalid,
            "self's leading dims " + ShapeText(self_lead) +
                " must equal sortedSequence's " + ShapeText(lead));
  }
  b.Check(b.V(o).dtype == (outInt32 ? kInt32 : kInt64), kParamInvalid,
          "out dtype " + DtypeName(b.V(o).dtype) + " does not match outInt32");
  b.Check(b.V(o).dims == values.dims, kParamInvalid,
          "out shape must be self's");
  if (!b.ok()) return b.Launch(0, nullptr);
  const bool batched = seq.Dim() > 1;
  return b.Launch(kReductionWorkspace, [=](const std::vector<TensorView>& v) {
    const TensorView& sv = v[q];
    const int64_t n = sv.dims.back();
    const int64_t inner = sv.strides.back();
    const auto seq_rows = LineStarts(sv, sv.Dim() - 1);
    const auto vs = Offsets(v[s]);
    const auto oo = Offsets(v[o]);
    const int64_t per_row =
        v[s].Dim() == 0 ? 1 : std::max<int64_t>(v[s].dims.back(), 1);
    for (size_t i = 0; i < vs.size(); ++i) {
      const int64_t start = batched            ? seq_rows[i / per_row]
                            : seq_rows.empty() ? 0
                                               : seq_rows[0];
      const double x = LoadDouble(v[s], vs[i]);
      int64_t found = n;
      if (!std::isnan(x)) {
        // Lower (upper) bound by binary search, like torch.
        int64_t lo = 0, hi = n;
        while (lo < hi) {
          const int64_t mid = lo + (hi - lo) / 2;
          const double m = LoadDouble(sv, start + mid * inner);
          const bool go_right = right ? !(m > x) : !(m >= x);
          if (go_right) {
            lo = mid + 1;
          } else {
            hi = mid;
          }
        }
        found = lo;
      }
      StoreInt(v[o], oo[i], found);
    }
    return kSuccess;
  });
}
DOUBLE_PHASE2(SearchSorted)

// ---- aclnnGather
// --------------------------------------------------------------------
// out[i] = self[i with i_dim replaced by index[i]] (torch.gather): index
// INT32 or INT64 with self's ndim, index.size(d) <= self.size(d) for d !=
// dim, out of index's shape and self's dtype. Index values are device data:
// one outside [-size, size) along dim is a run-time fault.
DOUBLE_API aclnnStatus aclnnGatherGetWorkspaceSize(
    const aclTensor* self, int64_t dim, const aclTensor* index, aclTensor* out,
    uint64_t* workspaceSize, aclOpExecutor** executor) {
  OpBuilder b("aclnnGather", workspaceSize, executor);
  const int s = b.In(self, "self");
  const int x = b.In(index, "index");
  const int o = b.Out(out, "out");
  if (!b.ok()) return b.Launch(0, nullptr);
  const TensorView& vs = b.V(s);
  const TensorView& vx = b.V(x);
  const int64_t d = NormalizeDim(dim, std::max<int64_t>(vs.Dim(), 1));
  b.Check(d >= 0, kParamInvalid,
          "dim " + std::to_string(dim) + " out of range");
  b.Check(vx.dtype == kInt32 || vx.dtype == kInt64, kParamInvalid,
          "index dtype must be INT32 or INT64, got " + DtypeName(vx.dtype));
  b.Check(vx.Dim() == vs.Dim(), kParamInvalid,
          "index must have self's number of dims");
  if (!b.ok()) return b.Launch(0, nullptr);
  for (int64_t i = 0; i < vs.Dim(); ++i) {
    b.Check(i == d || vx.dims[i] <= vs.dims[i], kParamInvalid,
            "index shape " + ShapeText(vx.dims) + " exceeds self " +
                ShapeText(vs.dims) + " outside dim");
  }
  b.Check(b.V(o).dtype == vs.dtype && b.V(o).dims == vx.dims, kParamInvalid,
          "out must have index's shape and self's dtype");
  if (!b.ok()) return b.Launch(0, nullptr);
  return b.Launch(kElementwiseWorkspace, [=](const std::vector<TensorView>& v) {
    int status = kSuccess;
    const TensorView& in = v[s];
    const int64_t size = in.Dim() == 0 ? 1 : in.dims[d];
    // Walk index's positions; self's offset uses index's coordinates.
    TensorView at = in;
    at.dims = v[x].dims;
    if (in.Dim() > 0) at.strides[d] = 0;
    const auto base = Offsets(at);
    const auto xs = Offsets(v[x]);
    const auto oo = Offsets(v[o]);
    for (size_t i = 0; i < oo.size(); ++i) {
      int64_t k = LoadInt(v[x], xs[i]);
      if (k < -size || k >= size) {
        Fault(&status, "aclnnGather: index " + std::to_string(k) +
                           " out of range for size " + std::to_string(size));
        continue;
      }
      if (k < 0) k += size;
      const int64_t from = base[i] + (in.Dim() > 0 ? k * in.strides[d] : 0);
      CopyElement(v[o], oo[i], in, from);
    }
    return status;
  });
}
DOUBLE_PHASE2(Gather)
