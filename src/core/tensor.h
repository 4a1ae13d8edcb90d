#ifndef POLYOPS_CORE_TENSOR_H_
#define POLYOPS_CORE_TENSOR_H_

#include <cstdint>
#include <string>

#include "core/data_type.h"
#include "core/device.h"

namespace polyops {

// Shapes and strides live inline so that building a view (on every call) never
// touches the heap. Eight dims cover every LLM tensor; more is a ValueError.
inline constexpr int kMaxDims = 8;

// Shape and dtype of an output the caller omitted (see the base headers'
// static `Default<Output>` functions).
struct TensorMeta {
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  DataType dtype = DataType::kFloat32;
};

// A non-owning view: data pointer, shape, strides in elements, dtype, device.
class Tensor {
 public:
  Tensor() = default;

  void* data() const { return data_; }
  int ndim() const { return ndim_; }
  int64_t size(int dim) const { return shape_[Wrap(dim)]; }
  int64_t stride(int dim) const { return strides_[Wrap(dim)]; }
  const int64_t* shape() const { return shape_; }
  const int64_t* strides() const { return strides_; }
  DataType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int element_size() const { return DataTypeSize(dtype_); }

  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data_);
  }

  int64_t numel() const {
    int64_t count = 1;
    for (int i = 0; i < ndim_; ++i) count *= shape_[i];
    return count;
  }

  bool IsContiguous() const {
    int64_t expected = 1;
    for (int i = ndim_ - 1; i >= 0; --i) {
      if (shape_[i] != 1 && strides_[i] != expected) return false;
      expected *= shape_[i];
    }
    return true;
  }

  bool SameShape(const Tensor& other) const {
    if (ndim_ != other.ndim_) return false;
    for (int i = 0; i < ndim_; ++i) {
      if (shape_[i] != other.shape_[i]) return false;
    }
    return true;
  }

  // "[4, 8]": for error messages.
  std::string ShapeString() const { return DimsString(shape_, ndim_); }
  std::string StridesString() const { return DimsString(strides_, ndim_); }

  static std::string DimsString(const int64_t* dims, int ndim) {
    std::string text = "[";
    for (int i = 0; i < ndim; ++i) {
      if (i) text += ", ";
      text += std::to_string(dims[i]);
    }
    return text + "]";
  }

  // The same view of other memory (an output allocated after validation).
  Tensor WithData(void* data) const {
    Tensor view = *this;
    view.data_ = data;
    return view;
  }

  // The same view with the stride of every size-1 dim set to the one a
  // packed layout of the dims inside it gives (stride(d + 1) *
  // max(size(d + 1), 1), 1 for the last dim), as torch's contiguous
  // strides are. Such a stride never moves an address, so views torch
  // treats alike (a one-head [T, 1, D] transposed from [1, T, D], a
  // stride-0 size-1 dim) get the same strides, the same layout checks and
  // the same instance-cache key. The bindings apply it to every tensor
  // they convert; a contiguous torch tensor keeps its strides.
  Tensor WithUnitStridesNormalized() const {
    Tensor view = *this;
    for (int i = ndim_ - 1; i >= 0; --i) {
      if (shape_[i] != 1) continue;
      view.strides_[i] =
          i == ndim_ - 1
              ? 1
              : view.strides_[i + 1] * (shape_[i + 1] > 1 ? shape_[i + 1] : 1);
    }
    return view;
  }

  // Only the bindings and tests build views; the caller has checked
  // ndim <= kMaxDims.
  static Tensor FromParts(void* data, int ndim, const int64_t* shape,
                          const int64_t* strides, DataType dtype,
                          Device device) {
    Tensor view;
    view.data_ = data;
    view.ndim_ = ndim;
    for (int i = 0; i < ndim; ++i) {
      view.shape_[i] = shape[i];
      view.strides_[i] = strides[i];
    }
    view.dtype_ = dtype;
    view.device_ = device;
    return view;
  }

 private:
  int Wrap(int dim) const { return dim < 0 ? dim + ndim_ : dim; }

  void* data_ = nullptr;
  int ndim_ = 0;
  int64_t shape_[kMaxDims] = {};
  int64_t strides_[kMaxDims] = {};
  DataType dtype_ = DataType::kFloat32;
  Device device_;
};

}  // namespace polyops

#endif  // POLYOPS_CORE_TENSOR_H_
