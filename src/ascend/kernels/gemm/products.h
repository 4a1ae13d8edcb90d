// The matrix-product launches matmul, gemm and linear share: aclnnMatmul,
// and aclnnAddmm (2-D) / aclnnBaddbmm (3-D), over views built from the
// validated layout (a helper header: it declares no op).
#ifndef POLYOPS_ASCEND_KERNELS_GEMM_PRODUCTS_H_
#define POLYOPS_ASCEND_KERNELS_GEMM_PRODUCTS_H_

#include <cstdint>
#include <initializer_list>
#include <utility>

#include "ascend/runtime/launch.h"
#include "core/gemm_layout.h"
#include "core/handle.h"
#include "core/tensor.h"

namespace polyops::ascend {

// cubeMathType 0, KEEP_DTYPE: float32 is multiplied in float32. 1
// (ALLOW_FP32_DOWN_PRECISION), which torch_npu passes by default, turns
// float32 into HFLOAT32 (10 mantissa bits) on Atlas A2/A3
// (docs/backends/ascend.md, trap "HF32"), far outside polyops' float32
// tolerance. float16/bfloat16 are not affected by it.
inline constexpr int8_t kKeepDtype = 0;

// A view of `data` (element type and device of `like`).
inline Tensor ViewOf(const Tensor& like, void* data,
                     std::initializer_list<int64_t> shape,
                     std::initializer_list<int64_t> strides) {
  return Tensor::FromParts(data, static_cast<int>(shape.size()), shape.begin(),
                           strides.begin(), like.dtype(), like.device());
}

// `t` with its last two dims swapped (op(x) = x.mT as a view, no copy).
inline Tensor Transposed(const Tensor& t, bool transpose) {
  if (!transpose) return t;
  int64_t shape[kMaxDims];
  int64_t strides[kMaxDims];
  for (int d = 0; d < t.ndim(); ++d) {
    shape[d] = t.size(d);
    strides[d] = t.stride(d);
  }
  std::swap(shape[t.ndim() - 1], shape[t.ndim() - 2]);
  std::swap(strides[t.ndim() - 1], strides[t.ndim() - 2]);
  return Tensor::FromParts(t.data(), t.ndim(), shape, strides, t.dtype(),
                           t.device());
}

// The logical matrices `matrix` of `t` as a 2-D view, or 3-D with `batch`
// (a batch stride of 0 repeats one matrix: a shared 2-D operand). Empty
// views point at `anchor` (live device memory), since an empty torch
// tensor may have no address.
inline Tensor MatrixView(const Tensor& t, const GemmMatrix& matrix,
                         int64_t batch, bool batched, int64_t rows,
                         int64_t cols, const Tensor& anchor) {
  void* data = batch * rows * cols == 0 ? anchor.data() : t.data();
  if (!batched) {
    return ViewOf(t, data, {rows, cols},
                  {matrix.row_stride, matrix.col_stride});
  }
  return ViewOf(t, data, {batch, rows, cols},
                {matrix.batch_stride, matrix.row_stride, matrix.col_stride});
}

inline LaunchFn AddmmLaunch() {
  static const auto launch = Phase2("aclnnAddmm", "8.0.RC1");
  return launch;
}
inline LaunchFn BaddbmmLaunch() {
  static const auto launch = Phase2("aclnnBaddbmm", "8.0.RC1");
  return launch;
}

// out = a @ b (torch.matmul broadcasting: a 2-D operand is shared by the
// other's batch). One launch on `executor`.
inline void RunMatmul(ExecutorCache& executor, const char* op,
                      const Handle& handle, const Tensor& a, const Tensor& b,
                      const Tensor& out) {
  using Fn = AclnnStatus (*)(const AclTensor*, const AclTensor*, AclTensor*,
                             int8_t, uint64_t*, AclOpExecutor**);
  struct Phase {
    static AclnnStatus Prepare(void*, AclTensor* const* t, uint64_t* workspace,
                               AclOpExecutor** made) {
      static const auto get =
          Phase1<Fn>("aclnnMatmulGetWorkspaceSize", "8.0.RC1");
      return get(t[0], t[1], t[2], kKeepDtype, workspace, made);
    }
  };
  static const auto launch = Phase2("aclnnMatmul", "8.0.RC1");
  executor.Run(op, "aclnnMatmul", handle,
               {Operand::In(a), Operand::In(b), Operand::Out(out)}, 0,
               &Phase::Prepare, nullptr, launch);
}

// out = beta * self + alpha * (a @ b): aclnnAddmm for 2-D operands (beta
// before alpha in its signature), aclnnBaddbmm for 3-D ones, whose batch
// sizes must be equal (use a batch stride of 0 to share a matrix). self
// broadcasts to out. With beta == 0 self is not read (torch.addmm's
// contract; the double implements it, never checked on a real toolkit).
inline void RunAddmm(ExecutorCache& executor, const char* op,
                     const Handle& handle, const Tensor& self, const Tensor& a,
                     const Tensor& b, const AclScalar* beta,
                     const AclScalar* alpha, const Tensor& out) {
  // aclnnAddmm and aclnnBaddbmm share one prototype.
  using Fn = AclnnStatus (*)(
      const AclTensor*, const AclTensor*, const AclTensor*, const AclScalar*,
      const AclScalar*, AclTensor*, int8_t, uint64_t*, AclOpExecutor**);
  struct Scalars {
    const AclScalar* beta;
    const AclScalar* alpha;
  };
  struct Phase {
    static AclnnStatus Addmm(void* context, AclTensor* const* t,
                             uint64_t* workspace, AclOpExecutor** made) {
      static const auto get =
          Phase1<Fn>("aclnnAddmmGetWorkspaceSize", "8.0.RC1");
      const auto* s = static_cast<const Scalars*>(context);
      return get(t[0], t[1], t[2], s->beta, s->alpha, t[3], kKeepDtype,
                 workspace, made);
    }
    static AclnnStatus Baddbmm(void* context, AclTensor* const* t,
                               uint64_t* workspace, AclOpExecutor** made) {
      static const auto get =
          Phase1<Fn>("aclnnBaddbmmGetWorkspaceSize", "8.0.RC1");
      const auto* s = static_cast<const Scalars*>(context);
      return get(t[0], t[1], t[2], s->beta, s->alpha, t[3], kKeepDtype,
                 workspace, made);
    }
  };
  Scalars scalars{beta, alpha};
  const bool batched = out.ndim() == 3;
  const char* api = batched ? "aclnnBaddbmm" : "aclnnAddmm";
  const LaunchFn launch = batched ? BaddbmmLaunch() : AddmmLaunch();
  executor.Run(
      op, api, handle,
      {Operand::In(self), Operand::In(a), Operand::In(b), Operand::Out(out)}, 0,
      batched ? &Phase::Baddbmm : &Phase::Addmm, &scalars, launch);
}

}  // namespace polyops::ascend

#endif  // POLYOPS_ASCEND_KERNELS_GEMM_PRODUCTS_H_
