#ifndef POLYOPS_CPU_CAT_OMP_H_
#define POLYOPS_CPU_CAT_OMP_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/cat.h"
#include "core/operator.h"
#include "cpu/runtime/parallel.h"

namespace polyops {

// Slot 0: a byte copy per piece (the dtype only sets the element width), one
// memcpy per run where both sides have unit inner stride. Large outputs are
// cut into chunks of about kChunkBytes, each within one piece, and the
// chunks are spread over OpenMP threads.
template <>
class Operator<Cat, Device::Type::kCpu, 0> : public Cat {
 public:
  static constexpr const char* kImplementationName = "omp";
  static constexpr int64_t kChunkBytes = 128 << 10;

  explicit Operator(const Args& args) : Cat(args) {
    chunk_elems_ = std::max<int64_t>(1, kChunkBytes / element_size_);
    chunk_begin_.reserve(pieces_.size() + 1);
    int64_t chunks = 0;
    for (const Piece& piece : pieces_) {
      chunk_begin_.push_back(chunks);
      chunks += (piece.layout.numel + chunk_elems_ - 1) / chunk_elems_;
    }
    chunk_begin_.push_back(chunks);
  }

  void operator()(const Handle&, const Args& args) const override {
    switch (element_size_) {
      case 1:
        return Run<uint8_t>(args.tensors, *args.out);
      case 2:
        return Run<uint16_t>(args.tensors, *args.out);
      case 4:
        return Run<uint32_t>(args.tensors, *args.out);
      default:
        return Run<uint64_t>(args.tensors, *args.out);
    }
  }

 private:
  template <typename E>
  void Run(const std::vector<Tensor>& tensors, const Tensor& out) const {
    const int64_t total = chunk_begin_.back();
    const bool parallel = numel_ >= cpu::kParallelGrain;
    E* const dst_base = out.data_as<E>();
    cpu::ParallelFor(total, parallel, [&](int64_t chunk) {
      // The piece whose chunk range holds `chunk` (pieces with no elements
      // own empty ranges and are skipped by upper_bound).
      const size_t p = static_cast<size_t>(
          std::upper_bound(chunk_begin_.begin(), chunk_begin_.end(), chunk) -
          chunk_begin_.begin() - 1);
      const Piece& piece = pieces_[p];
      const int64_t begin = (chunk - chunk_begin_[p]) * chunk_elems_;
      const int64_t end = std::min(piece.layout.numel, begin + chunk_elems_);
      CopyRange(piece, tensors[p].data_as<const E>(),
                dst_base + piece.out_offset, begin, end);
    });
  }

  // Elements [begin, end) of the piece's iteration space, run by run.
  template <typename E>
  static void CopyRange(const Piece& piece, const E* src, E* dst, int64_t begin,
                        int64_t end) {
    const ElementwiseLayout<2>& layout = piece.layout;
    const int64_t inner = layout.inner();
    const int last = layout.ndim - 1;
    const int64_t dst_stride = layout.strides[0][last];
    const int64_t src_stride = layout.strides[1][last];
    for (int64_t at = begin; at < end;) {
      int64_t offsets[2];
      layout.Offsets(at, offsets);
      const int64_t n = std::min(inner - at % inner, end - at);
      E* d = dst + offsets[0];
      const E* s = src + offsets[1];
      if ((dst_stride == 1 && src_stride == 1) || n == 1) {
        std::memcpy(d, s, static_cast<size_t>(n) * sizeof(E));
      } else {
        for (int64_t i = 0; i < n; ++i) d[i * dst_stride] = s[i * src_stride];
      }
      at += n;
    }
  }

  int64_t chunk_elems_ = 1;
  // chunk_begin_[p]: the first chunk of piece p; the last entry is the total.
  std::vector<int64_t> chunk_begin_;
};

}  // namespace polyops

#endif  // POLYOPS_CPU_CAT_OMP_H_
