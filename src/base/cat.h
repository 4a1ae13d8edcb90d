#ifndef POLYOPS_BASE_CAT_H_
#define POLYOPS_BASE_CAT_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "core/checks.h"
#include "core/elementwise_layout.h"
#include "core/handle.h"
#include "core/instance_cache.h"

namespace polyops {

// cat(tensors, dim=0, *, out=None) -> Tensor
//
// torch.cat: the tensors joined along `dim` in list order.
//   tensors: a non-empty list or tuple of tensors with at least one dim, all
//            of one dtype (bool, int8/16/32/64, uint8, float16, bfloat16,
//            float32 or float64), the same number of dims and the same sizes
//            in every dim but `dim`; any strides. Pieces of size 0 along
//            `dim` are allowed (torch's legacy 1-D empty tensor of shape [0]
//            beside tensors of other ranks is not: a ValueError).
//   dim:     in [-ndim, ndim); negative counts from the end.
//   out:     the joined shape, the tensors' dtype, any strides (it must not
//            overlap the inputs); allocated contiguous when omitted.
class Cat : public OperatorBase {
 public:
  static constexpr const char* kName = "cat";
  static constexpr int kNumPositional = 2;

  // The call's arguments, in the constructor's order. Slots take them as
  // one struct: a new parameter touches this header and the slots that
  // read it.
  struct Args {
    const std::vector<Tensor>& tensors;
    int64_t dim;
    const std::optional<Tensor>& out;
  };

  Cat(const std::vector<Tensor>& tensors, int64_t dim = 0,
      const std::optional<Tensor>& out = std::nullopt) {
    const Tensor& output = RequireOutput(kName, "out", out);
    POLYOPS_CHECK(!tensors.empty(),
                  "polyops.cat: tensors must be a non-empty list");
    const Tensor& first = tensors.front();
    const int ndim = first.ndim();
    POLYOPS_CHECK(ndim >= 1,
                  "polyops.cat: tensors[0] must have at least 1 dim, got "
                  "shape ",
                  first.ShapeString());
    POLYOPS_CHECK(dim >= -ndim && dim < ndim, "polyops.cat: dim must be in [",
                  -ndim, ", ", ndim, ") for tensors of ", ndim, " dims, got ",
                  dim);
    dim_ = static_cast<int>(dim < 0 ? dim + ndim : dim);
    int64_t joined = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const Tensor& tensor = tensors[i];
      POLYOPS_CHECK(tensor.dtype() == first.dtype(), "polyops.cat: tensors[", i,
                    "] must have the dtype of tensors[0] (",
                    DataTypeName(first.dtype()), "), got ",
                    DataTypeName(tensor.dtype()));
      bool same = tensor.ndim() == ndim;
      for (int d = 0; same && d < ndim; ++d) {
        same = d == dim_ || tensor.size(d) == first.size(d);
      }
      POLYOPS_CHECK(same, "polyops.cat: tensors[", i,
                    "] must have the shape of tensors[0] ", first.ShapeString(),
                    " in every dim but dim ", dim_, ", got ",
                    tensor.ShapeString());
      joined += tensor.size(dim_);
    }
    CheckSameDtype(kName, "out", output, "tensors[0]", first);
    bool out_ok = output.ndim() == ndim;
    for (int d = 0; out_ok && d < ndim; ++d) {
      out_ok = output.size(d) == (d == dim_ ? joined : first.size(d));
    }
    if (!out_ok) {
      int64_t expected[kMaxDims];
      for (int d = 0; d < ndim; ++d) expected[d] = first.size(d);
      expected[dim_] = joined;
      POLYOPS_CHECK(false, "polyops.cat: out must have shape ",
                    Tensor::DimsString(expected, ndim), ", got ",
                    output.ShapeString());
    }
    element_size_ = first.element_size();
    // Each piece is a copy into the slice of `out` at its offset along dim.
    int64_t offset = 0;
    pieces_.reserve(tensors.size());
    for (const Tensor& tensor : tensors) {
      const int64_t* strides[2] = {output.strides(), tensor.strides()};
      Piece piece;
      piece.layout = ElementwiseLayout<2>::Make(ndim, tensor.shape(), strides);
      piece.out_offset = offset * output.stride(dim_);
      offset += tensor.size(dim_);
      pieces_.push_back(piece);
      numel_ += piece.layout.numel;
    }
  }

  explicit Cat(const Args& args) : Cat(args.tensors, args.dim, args.out) {}

  virtual void operator()(const Handle& handle, const Args& args) const = 0;

  // Runs before validation: any shape it cannot join is left for the
  // constructor to report, except an empty list, which has nothing to
  // allocate like.
  static TensorMeta DefaultOut(const std::vector<Tensor>& tensors,
                               int64_t dim) {
    POLYOPS_CHECK(!tensors.empty(),
                  "polyops.cat: tensors must be a non-empty list");
    TensorMeta meta = MetaLike(tensors.front());
    const int ndim = meta.ndim;
    if (ndim == 0 || dim < -ndim || dim >= ndim) return meta;
    const int d = static_cast<int>(dim < 0 ? dim + ndim : dim);
    int64_t joined = 0;
    for (const Tensor& tensor : tensors) {
      if (tensor.ndim() == ndim) joined += tensor.size(d);
    }
    meta.shape[d] = joined;
    return meta;
  }

 protected:
  struct Piece {
    // Operands: the piece's slice of out (from out_offset), the piece.
    ElementwiseLayout<2> layout;
    int64_t out_offset = 0;
  };
  int dim_ = 0;
  int element_size_ = 1;
  int64_t numel_ = 0;
  std::vector<Piece> pieces_;
};

}  // namespace polyops

#endif  // POLYOPS_BASE_CAT_H_
