// Memory overlap between strided views, for the output checks every op runs
// (CheckOverlaps below, called by the generated Run<Op>; docs/user/api.md,
// "Overlap").
//
// A view is a set of byte intervals: base + sum_k i_k * stride_k for every
// index, each `element size` bytes wide. Two views overlap when the sets
// intersect. Byte ranges decide almost every call in O(ndim); the exact
// test below handles views that interleave without sharing a byte (vLLM's
// q/k/v slices of one qkv buffer, K and V caches sliced from one
// allocation) in a few steps, because views cut from one buffer share their
// outer strides. Where it would need more than kOverlapBudget steps it says
// "overlap": a refused call is safe, a missed overlap is a wrong answer.
#ifndef POLYOPS_CORE_OVERLAP_H_
#define POLYOPS_CORE_OVERLAP_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace polyops {

enum class Overlap { kNone, kFull, kPartial };

namespace detail {

inline constexpr int kOverlapBudget = 4096;

// Floor and ceiling of a / b for b > 0.
inline int64_t FloorDiv(int64_t a, int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}
inline int64_t CeilDiv(int64_t a, int64_t b) { return -FloorDiv(-a, b); }

// A view in bytes, outermost (largest stride) dim first; dims of size 1 and
// stride-0 dims (they add no address) are dropped; runs of contiguous inner
// dims are folded into `width`.
struct ByteSpan {
  int64_t base = 0;
  int64_t width = 0;
  int ndim = 0;
  int64_t size[kMaxDims] = {};
  int64_t stride[kMaxDims] = {};
  bool empty = false;

  int64_t Begin() const { return base; }
  int64_t End() const {
    int64_t end = base + width;
    for (int k = 0; k < ndim; ++k) end += (size[k] - 1) * stride[k];
    return end;
  }
  // The view without its outermost dim, moved by `shift` bytes.
  ByteSpan Inner(int64_t shift) const {
    ByteSpan inner = *this;
    inner.base += shift;
    inner.ndim = ndim - 1;
    for (int k = 0; k < inner.ndim; ++k) {
      inner.size[k] = size[k + 1];
      inner.stride[k] = stride[k + 1];
    }
    return inner;
  }
};

inline ByteSpan MakeByteSpan(const Tensor& tensor, int64_t origin) {
  ByteSpan span;
  const int64_t element = tensor.element_size();
  span.base =
      static_cast<int64_t>(reinterpret_cast<uintptr_t>(tensor.data())) - origin;
  span.width = element;
  int64_t sizes[kMaxDims], strides[kMaxDims];
  int n = 0;
  for (int k = 0; k < tensor.ndim(); ++k) {
    if (tensor.size(k) == 0) span.empty = true;
    if (tensor.size(k) <= 1 || tensor.stride(k) == 0) continue;
    sizes[n] = tensor.size(k);
    strides[n] = tensor.stride(k) * element;
    ++n;
  }
  // Innermost first (insertion sort: at most 8 dims).
  for (int i = 1; i < n; ++i) {
    for (int j = i; j > 0 && strides[j] < strides[j - 1]; --j) {
      std::swap(strides[j], strides[j - 1]);
      std::swap(sizes[j], sizes[j - 1]);
    }
  }
  int first = 0;
  while (first < n && strides[first] == span.width) {
    span.width *= sizes[first];
    ++first;
  }
  for (int k = n - 1; k >= first; --k) {
    span.size[span.ndim] = sizes[k];
    span.stride[span.ndim] = strides[k];
    ++span.ndim;
  }
  return span;
}

inline bool Intersects(const ByteSpan& a, const ByteSpan& b, int& budget) {
  if (a.empty || b.empty) return false;
  if (a.End() <= b.Begin() || b.End() <= a.Begin()) return false;
  if (--budget < 0) return true;
  if (a.ndim == 0 && b.ndim == 0) return true;
  if (a.ndim > 0 && b.ndim > 0 && a.stride[0] == b.stride[0]) {
    // A = U_i (A' + i s), B = U_j (B' + j s): they meet iff A' meets
    // B' + m s for some m = j - i, and only a few m reach A's range.
    const int64_t s = a.stride[0];
    const ByteSpan a_inner = a.Inner(0);
    const ByteSpan b_inner = b.Inner(0);
    const int64_t m_low = std::max(
        -(a.size[0] - 1), FloorDiv(a_inner.Begin() - b_inner.End(), s) + 1);
    const int64_t m_high = std::min(
        b.size[0] - 1, CeilDiv(a_inner.End() - b_inner.Begin(), s) - 1);
    for (int64_t m = m_low; m <= m_high; ++m) {
      if (Intersects(a_inner, b.Inner(m * s), budget)) return true;
    }
    return false;
  }
  // Split the view with the longer outer extent, visiting only the slices
  // that reach the other's byte range.
  const int64_t a_extent = a.ndim > 0 ? (a.size[0] - 1) * a.stride[0] : -1;
  const int64_t b_extent = b.ndim > 0 ? (b.size[0] - 1) * b.stride[0] : -1;
  const bool split_a = a_extent >= b_extent;
  const ByteSpan& outer = split_a ? a : b;
  const ByteSpan& other = split_a ? b : a;
  const int64_t s = outer.stride[0];
  const ByteSpan slice = outer.Inner(0);
  const int64_t first =
      std::max<int64_t>(0, FloorDiv(other.Begin() - slice.End(), s) + 1);
  const int64_t last =
      std::min(outer.size[0] - 1, CeilDiv(other.End() - slice.Begin(), s) - 1);
  for (int64_t i = first; i <= last; ++i) {
    if (Intersects(outer.Inner(i * s), other, budget)) return true;
  }
  return false;
}

}  // namespace detail

// How `a` and `b` share memory: kFull when they are the same view (same
// address, shape, strides and element size), kPartial when any byte is
// shared otherwise (or the check ran out of budget), kNone else.
inline Overlap MemoryOverlap(const Tensor& a, const Tensor& b) {
  if (a.device() != b.device() || a.numel() == 0 || b.numel() == 0) {
    return Overlap::kNone;
  }
  // Disjoint byte ranges decide almost every call without sorting dims.
  const auto range = [](const Tensor& t, uintptr_t& begin, uintptr_t& end) {
    int64_t last = 0;
    for (int k = 0; k < t.ndim(); ++k) last += (t.size(k) - 1) * t.stride(k);
    begin = reinterpret_cast<uintptr_t>(t.data());
    end = begin + static_cast<uintptr_t>((last + 1) * t.element_size());
  };
  uintptr_t a_begin, a_end, b_begin, b_end;
  range(a, a_begin, a_end);
  range(b, b_begin, b_end);
  if (a_end <= b_begin || b_end <= a_begin) return Overlap::kNone;
  if (a.data() == b.data() && a.element_size() == b.element_size() &&
      a.SameShape(b)) {
    bool same_strides = true;
    for (int k = 0; k < a.ndim(); ++k) {
      same_strides &= a.size(k) <= 1 || a.stride(k) == b.stride(k);
    }
    if (same_strides) return Overlap::kFull;
  }
  const int64_t origin =
      static_cast<int64_t>(reinterpret_cast<uintptr_t>(a.data()));
  int budget = detail::kOverlapBudget;
  return detail::Intersects(detail::MakeByteSpan(a, origin),
                            detail::MakeByteSpan(b, origin), budget)
             ? Overlap::kPartial
             : Overlap::kNone;
}

// Whether two indices of `tensor` may address one byte (a stride-0 dim of
// size > 1, or strides too small for the dims inside them). Conservative
// for exotic as_strided layouts that interleave without colliding.
inline bool HasInternalOverlap(const Tensor& tensor) {
  if (tensor.numel() <= 1 || tensor.IsContiguous()) return false;
  for (int k = 0; k < tensor.ndim(); ++k) {
    if (tensor.size(k) > 1 && tensor.stride(k) == 0) return true;
  }
  const detail::ByteSpan span = detail::MakeByteSpan(tensor, 0);
  int64_t extent = span.width;  // bytes covered by the dims inside dim k
  for (int k = span.ndim - 1; k >= 0; --k) {
    if (span.stride[k] < extent) return true;
    extent += (span.size[k] - 1) * span.stride[k];
  }
  return false;
}

// An argument of a call, by name; `view` is null when it was not given.
struct NamedView {
  const char* name;
  const Tensor* view;
};

namespace detail {

inline bool MayAlias(std::initializer_list<const char*> aliases,
                     const char* output, const char* input) {
  const size_t length = std::strlen(output);
  for (const char* pair : aliases) {
    if (std::strncmp(pair, output, length) == 0 && pair[length] == '=' &&
        std::strcmp(pair + length + 1, input) == 0) {
      return true;
    }
  }
  return false;
}

inline void CheckPair(const char* op, const NamedView& written,
                      const NamedView& other, bool other_written,
                      std::initializer_list<const char*> aliases) {
  const Overlap overlap = MemoryOverlap(*written.view, *other.view);
  if (overlap == Overlap::kNone) return;
  if (overlap == Overlap::kFull && !other_written &&
      MayAlias(aliases, written.name, other.name)) {
    return;
  }
  std::string allowed;
  for (const char* pair : aliases) {
    allowed += allowed.empty() ? "" : ", ";
    allowed += pair;
  }
  throw InvalidArgument(Concat(
      "polyops.", op, ": ", written.name, " and ", other.name,
      overlap == Overlap::kFull ? " are the same memory" : " overlap in memory",
      "; an output may share memory with another argument only as an exact "
      "in-place alias the op documents (",
      allowed.empty() ? "none for this op" : allowed, ")"));
}

}  // namespace detail

// The per-call check of what an op writes: no written tensor may have
// internal overlap, overlap another written tensor, or overlap an argument
// it reads unless it is exactly that argument and `aliases` lists the pair
// ("out=input"). `group` is a list argument such as cat's tensors.
inline void CheckOverlaps(const char* op,
                          std::initializer_list<NamedView> written,
                          std::initializer_list<NamedView> read,
                          std::initializer_list<const char*> aliases,
                          const std::vector<Tensor>* group = nullptr,
                          const char* group_name = nullptr) {
  for (auto w = written.begin(); w != written.end(); ++w) {
    if (!w->view) continue;
    POLYOPS_CHECK(!HasInternalOverlap(*w->view), "polyops.", op, ": ", w->name,
                  " of shape ", w->view->ShapeString(), " and strides ",
                  w->view->StridesString(),
                  " has elements that share memory (a stride-0 dim such as "
                  "from expand(), or overlapping strides); write into a "
                  "tensor whose elements are distinct");
    for (auto other = w + 1; other != written.end(); ++other) {
      if (other->view && other->view != w->view) {
        detail::CheckPair(op, *w, *other, /*other_written=*/true, aliases);
      }
    }
    for (const NamedView& input : read) {
      if (input.view && input.view != w->view) {
        detail::CheckPair(op, *w, input, /*other_written=*/false, aliases);
      }
    }
    if (group) {
      for (const Tensor& tensor : *group) {
        detail::CheckPair(op, *w, NamedView{group_name, &tensor},
                          /*other_written=*/false, aliases);
      }
    }
  }
}

}  // namespace polyops

#endif  // POLYOPS_CORE_OVERLAP_H_
