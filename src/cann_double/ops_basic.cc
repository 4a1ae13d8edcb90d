// libopapi.so of the CANN test double, part 1: elementwise, norms,
// activations, softmax, copies and matrix products (prototypes:
// docs/backends/ascend.md, "CANN sources and traps").
//
// Each aclnnXxxGetWorkspaceSize validates like CANN (161001 null, 161002
// dtype/shape/attr) and captures its host parameters in the executor's
// computation; tensor addresses come from the executor snapshot at run time.
#include <cmath>
#include <limits>

#include "kernels.h"

using namespace cann_double;  // NOLINT: the C entry points below

namespace {

enum class Binary { kAdd, kMul };

// add and mul: broadcast, type promotion, a result castable to out.
aclnnStatus BinaryGetWorkspaceSize(const char* op, Binary kind,
                                   const aclTensor* self,
                                   const aclTensor* other,
                                   const aclScalar* alpha, aclTensor* out,
                                   uint64_t* workspace_size,
                                   aclOpExecutor** executor) {
  OpBuilder b(op, workspace_size, executor);
  const int a = b.In(self, "self");
  const int c = b.In(other, "other");
  const aclScalar* s =
      kind == Binary::kAdd ? b.Scalar(alpha, "alpha") : nullptr;
  const int o = b.Out(out, "out");
  if (!b.ok()) return b.Launch(0, nullptr);
  const TensorView& va = b.V(a);
  const TensorView& vc = b.V(c);
  const TensorView& vo = b.V(o);
  Dims shape;
  b.Check(BroadcastShape(va.dims, vc.dims, &shape), kParamInvalid,
          "shapes " + ShapeText(va.dims) + " and " + ShapeText(vc.dims) +
              " do not broadcast");
  b.Check(!b.ok() || vo.dims == shape, kParamInvalid,
          "out shape " + ShapeText(vo.dims) + " is not the broadcast shape " +
              ShapeText(shape));
  const int32_t promoted = PromoteTypes(va.dtype, vc.dtype);
  b.Check(CanCast(promoted, vo.dtype), kParamInvalid,
          "result dtype " + DtypeName(promoted) + " cannot be cast to out " +
              DtypeName(vo.dtype));
  double alpha_value = 1;
  if (s != nullptr) {
    alpha_value = ScalarValue(s);
    b.Check(IsFloating(promoted) || !IsFloating(s->dtype) ||
                alpha_value == std::trunc(alpha_value),
            kParamInvalid,
            "alpha " + std::to_string(alpha_value) +
                " cannot be converted to " + DtypeName(promoted));
  }
  const bool integral = !IsFloating(promoted) && !IsFloating(vo.dtype);
  const int64_t alpha_int =
      s != nullptr ? static_cast<int64_t>(alpha_value) : 1;
  return b.Launch(kElementwiseWorkspace, [=](const std::vector<TensorView>& v) {
    const auto oa = BroadcastOffsets(v[a], v[o].dims);
    const auto oc = BroadcastOffsets(v[c], v[o].dims);
    const auto oo = Offsets(v[o]);
    for (size_t i = 0; i < oo.size(); ++i) {
      if (integral) {
        const int64_t x = LoadInt(v[a], oa[i]);
        const int64_t y = LoadInt(v[c], oc[i]);
        // Unsigned arithmetic: overflow wraps instead of being undefined.
        const auto ux = static_cast<uint64_t>(x);
        const auto uy = static_cast<uint64_t>(y);
        const uint64_t r = kind == Binary::kAdd
                               ? ux + static_cast<uint64_t>(alpha_int) * uy
                               : ux * uy;
        StoreInt(v[o], oo[i], static_cast<int64_t>(r));
      } else {
        // The promoted dtype is the computation dtype: a half-precision
        // product or sum is one rounding of the exact result, and a
        // float64 x + alpha * y one fused multiply-add.
        const double x = LoadDouble(v[a], oa[i]);
        const double y = LoadDouble(v[c], oc[i]);
        const double r =
            kind == Binary::kAdd ? std::fma(alpha_value, y, x) : x * y;
        StoreDouble(v[o], oo[i], RoundTo(promoted, r));
      }
    }
    return kSuccess;
  });
}

// A row-wise pass over the trailing `inner_dims` dims of x: offsets of the
// rows (leading dims) and of the elements within a row.
struct Rows {
  std::vector<int64_t> lead;
  std::vector<int64_t> inner;
};
Rows SplitRows(const TensorView& t, size_t inner_dims) {
  const size_t split = t.dims.size() - inner_dims;
  return {Offsets(SubView(t, 0, split)), Offsets(SubView(t, split, t.Dim()))};
}

bool RmsNormDtypes(int32_t x, int32_t gamma) {
  return (x == gamma && IsHalfOrFloat(x)) ||
         ((x == kFloat16 || x == kBf16) && gamma == kFloat);
}

// Checks rstd: FLOAT32, x's ndim, the normalized (trailing) dims set to 1.
void CheckRstd(OpBuilder& b, const TensorView& x, size_t normalized,
               const TensorView& rstd) {
  Dims expected = x.dims;
  for (size_t i = x.dims.size() - normalized; i < x.dims.size(); ++i) {
    expected[i] = 1;
  }
  b.Check(rstd.dtype == kFloat, kParamInvalid,
          "rstdOut must be FLOAT32, got " + DtypeName(rstd.dtype));
  b.Check(rstd.dims == expected, kParamInvalid,
          "rstdOut shape " + ShapeText(rstd.dims) + " must be " +
              ShapeText(expected) +
              " (x's ndim with the normalized dims set to 1)");
}

void CheckGamma(OpBuilder& b, const TensorView& x, const TensorView& gamma) {
  const size_t k = gamma.dims.size();
  b.Check(k >= 1 && k <= x.dims.size() &&
              Dims(x.dims.end() - k, x.dims.end()) == gamma.dims,
          kParamInvalid,
          "gamma shape " + ShapeText(gamma.dims) +
              " must equal the trailing dims of x " + ShapeText(x.dims));
  b.Check(RmsNormDtypes(x.dtype, gamma.dtype), kParamInvalid,
          "unsupported (x, gamma) dtypes (" + DtypeName(x.dtype) + ", " +
              DtypeName(gamma.dtype) + ")");
}

// y = x * rstd * gamma over rows; x1 (+ x2, rounded to x's dtype and stored
// to sum_slot when sum_slot >= 0).
int RmsNormRows(const std::vector<TensorView>& v, int x1, int x2, int gamma,
                double epsilon, int y, int rstd, int sum_slot) {
  const size_t k = v[gamma].dims.size();
  const Rows r1 = SplitRows(v[x1], k);
  const Rows ry = SplitRows(v[y], k);
  const Rows rs = SplitRows(v[rstd], k);
  const auto og = Offsets(v[gamma]);
  Rows r2;
  Rows rsum;
  if (x2 >= 0) r2 = SplitRows(v[x2], k);
  if (sum_slot >= 0) rsum = SplitRows(v[sum_slot], k);
  const size_t n = r1.inner.size();
  std::vector<double> row(n);
  for (size_t i = 0; i < r1.lead.size(); ++i) {
    double squares = 0;
    for (size_t j = 0; j < n; ++j) {
      double value = LoadDouble(v[x1], r1.lead[i] + r1.inner[j]);
      if (x2 >= 0) {
        // The residual sum is rounded to x's dtype and normalized as stored.
        value = RoundTo(v[x1].dtype,
                        value + LoadDouble(v[x2], r2.lead[i] + r2.inner[j]));
      }
      row[j] = value;
      squares += value * value;
    }
    const double scale = 1.0 / std::sqrt(squares / n + epsilon);
    if (sum_slot >= 0) {
      for (size_t j = 0; j < n; ++j) {
        StoreDouble(v[sum_slot], rsum.lead[i] + rsum.inner[j], row[j]);
      }
    }
    for (size_t j = 0; j < n; ++j) {
      StoreDouble(v[y], ry.lead[i] + ry.inner[j],
                  row[j] * scale * LoadDouble(v[gamma], og[j]));
    }
    StoreDouble(v[rstd], rs.lead[i], scale);
  }
  return kSuccess;
}

void CheckSame(OpBuilder& b, const TensorView& t, const TensorView& like,
               const char* name) {
  b.Check(t.dims == like.dims && t.dtype == like.dtype, kParamInvalid,
          std::string(name) + " must have shape " + ShapeText(like.dims) +
              " and dtype " + DtypeName(like.dtype) + ", got " +
              ShapeText(t.dims) + " " + DtypeName(t.dtype));
}

// Ordered float dtypes of the activations.
bool CheckFloatIn(OpBuilder& b, const TensorView& t, const char* name) {
  return b.Check(IsHalfOrFloat(t.dtype), kParamInvalid,
                 std::string(name) + " dtype " + DtypeName(t.dtype) +
                     " is not FLOAT, FLOAT16 or BF16");
}

// ---- matrix products --------------------------------------------------------

// cubeMathType: 0 KEEP_DTYPE, 1 ALLOW_FP32_DOWN_PRECISION, 2 USE_FP16,
// 3 USE_HF32, 4 fp32 grouped accumulation (exact here).
enum class InputRounding { kNone, kHf32, kFp16 };

float RoundHf32(float f) {
  uint32_t bits = FloatBits(f);
  if ((bits & 0x7f800000u) == 0x7f800000u) return f;
  // HFLOAT32 keeps fp32's exponent and 10 mantissa bits; round to nearest
  // even (the hardware rounding mode is not documented).
  bits += 0xfff + ((bits >> 13) & 1);
  return BitsFloat(bits & ~0x1fffu);
}

double LoadOperand(const TensorView& t, int64_t offset, InputRounding r) {
  const double v = LoadDouble(t, offset);
  if (r == InputRounding::kHf32) return RoundHf32(static_cast<float>(v));
  if (r == InputRounding::kFp16) {
    return HalfToFloat(FloatToHalf(static_cast<float>(v)));
  }
  return v;
}

bool CubeRounding(OpBuilder& b, int8_t cube, int32_t dtype, InputRounding* r) {
  *r = InputRounding::kNone;
  if (!b.Check(cube >= 0 && cube <= 4, kParamInvalid,
               "cubeMathType " + std::to_string(cube) + " is not 0..4")) {
    return false;
  }
  if (!b.Check(!(cube == 2 && dtype == kBf16), kParamInvalid,
               "cubeMathType 2 (USE_FP16) is not supported for BF16")) {
    return false;
  }
  if (dtype == kFloat && (cube == 1 || cube == 3)) *r = InputRounding::kHf32;
  if (dtype == kFloat && cube == 2) *r = InputRounding::kFp16;
  return true;
}

// A matrix operand: batch dims + [rows, cols], strides in elements.
struct Matrix {
  TensorView batch;  // the leading dims only (offset kept)
  int64_t rows, cols, row_stride, col_stride;
};

// Views t (ndim >= 1) as a batch of matrices; a 1-D tensor is a row vector
// (vector_is_row) or a column vector.
Matrix AsMatrix(const TensorView& t, bool vector_is_row) {
  Matrix m;
  const size_t n = t.dims.size();
  if (n == 1) {
    m.batch = SubView(t, 0, 0);
    if (vector_is_row) {
      m.rows = 1, m.cols = t.dims[0], m.row_stride = 0,
      m.col_stride = t.strides[0];
    } else {
      m.rows = t.dims[0], m.cols = 1, m.row_stride = t.strides[0],
      m.col_stride = 0;
    }
    return m;
  }
  m.batch = SubView(t, 0, n - 2);
  m.rows = t.dims[n - 2];
  m.cols = t.dims[n - 1];
  m.row_stride = t.strides[n - 2];
  m.col_stride = t.strides[n - 1];
  return m;
}

// Row-major [batch..., M, N] results of a @ b in double.
std::vector<double> Product(const TensorView& at, const Matrix& a,
                            const TensorView& bt, const Matrix& b,
                            const Dims& batch, InputRounding rounding) {
  const auto a_base = BroadcastOffsets(a.batch, batch);
  const auto b_base = BroadcastOffsets(b.batch, batch);
  const int64_t m = a.rows, k = a.cols, n = b.cols;
  std::vector<double> result(a_base.size() * m * n);
  std::vector<double> a_row(k);
  for (size_t p = 0; p < a_base.size(); ++p) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t x = 0; x < k; ++x) {
        a_row[x] = LoadOperand(
            at, a_base[p] + i * a.row_stride + x * a.col_stride, rounding);
      }
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t x = 0; x < k; ++x) {
          sum +=
              a_row[x] *
              LoadOperand(bt, b_base[p] + x * b.row_stride + j * b.col_stride,
                          rounding);
        }
        result[(p * m + i) * n + j] = sum;
      }
    }
  }
  return result;
}

void CheckMatmulDtypes(OpBuilder& b, const TensorView& a, const TensorView& m,
                       const TensorView& out) {
  b.Check(IsHalfOrFloat(a.dtype) && a.dtype == m.dtype, kParamInvalid,
          "operands must share one of FLOAT, FLOAT16, BF16 (got " +
              DtypeName(a.dtype) + ", " + DtypeName(m.dtype) + ")");
  b.Check(out.dtype == a.dtype || out.dtype == kFloat, kParamInvalid,
          "out dtype " + DtypeName(out.dtype) + " must be " +
              DtypeName(a.dtype) + " or FLOAT");
}

// matmul / mm / addmm / baddbmm: out = beta * bias + alpha * (a @ b).
aclnnStatus GemmGetWorkspaceSize(const char* op, const aclTensor* bias,
                                 const aclTensor* self, const aclTensor* mat2,
                                 const aclScalar* beta, const aclScalar* alpha,
                                 aclTensor* out, int8_t cube, int exact_ndim,
                                 uint64_t* workspace_size,
                                 aclOpExecutor** executor) {
  OpBuilder b(op, workspace_size, executor);
  const bool has_bias = exact_ndim > 0 && std::string(op) != "aclnnMm";
  const int c = has_bias ? b.In(bias, "self") : -1;
  const int a = b.In(self, has_bias ? "mat1" : "self");
  const int m = b.In(mat2, "mat2");
  const aclScalar* s_beta = has_bias ? b.Scalar(beta, "beta") : nullptr;
  const aclScalar* s_alpha = has_bias ? b.Scalar(alpha, "alpha") : nullptr;
  const int o = b.Out(out, "out");
  if (!b.ok()) return b.Launch(0, nullptr);
  const TensorView& va = b.V(a);
  const TensorView& vm = b.V(m);
  const TensorView& vo = b.V(o);
  CheckMatmulDtypes(b, va, vm, vo);
  InputRounding rounding;
  CubeRounding(b, cube, va.dtype, &rounding);
  if (exact_ndim > 0) {
    b.Check(va.Dim() == exact_ndim && vm.Dim() == exact_ndim, kParamInvalid,
            std::string(op) + " needs " + std::to_string(exact_ndim) +
                "-D operands, got " + ShapeText(va.dims) + " and " +
                ShapeText(vm.dims));
  } else {
    b.Check(va.Dim() >= 1 && vm.Dim() >= 1, kParamInvalid,
            "matmul operands must be at least 1-D");
  }
  if (!b.ok()) return b.Launch(0, nullptr);
  const Matrix ma = AsMatrix(va, true);
  const Matrix mm = AsMatrix(vm, false);
  Dims batch;
  b.Check(
      ma.cols == mm.rows, kParamInvalid,
      "inner dims differ: " + ShapeText(va.dims) + " @ " + ShapeText(vm.dims));
  b.Check(BroadcastShape(ma.batch.dims, mm.batch.dims, &batch) &&
              (exact_ndim != 3 || va.dims[0] == vm.dims[0]),
          kParamInvalid, "batch dims do not broadcast");
  Dims expected = batch;
  if (va.Dim() > 1) expected.push_back(ma.rows);
  if (vm.Dim() > 1) expected.push_back(mm.cols);
  b.Check(
      vo.dims == expected, kParamInvalid,
      "out shape " + ShapeText(vo.dims) + " must be " + ShapeText(expected));
  double beta_value = 0;
  double alpha_value = 1;
  if (has_bias) {
    b.Check(BroadcastsTo(b.V(c).dims, expected), kParamInvalid,
            "self shape " + ShapeText(b.V(c).dims) + " does not broadcast to " +
                ShapeText(expected));
    beta_value = ScalarValue(s_beta);
    alpha_value = ScalarValue(s_alpha);
  }
  return b.Launch(kMatmulWorkspace, [=](const std::vector<TensorView>& v) {
    Matrix pa = ma, pm = mm;
    pa.batch.data = v[a].data;
    pm.batch.data = v[m].data;
    const auto product = Product(v[a], pa, v[m], pm, batch, rounding);
    const auto oo = Offsets(v[o]);
    std::vector<int64_t> oc;
    if (c >= 0 && beta_value != 0) oc = BroadcastOffsets(v[c], v[o].dims);
    for (size_t i = 0; i < oo.size(); ++i) {
      double r = alpha_value * product[i];
      // beta == 0 ignores self entirely (NaN/inf in self do not propagate).
      if (!oc.empty()) r += beta_value * LoadDouble(v[c], oc[i]);
      StoreDouble(v[o], oo[i], r);
    }
    return kSuccess;
  });
}

}  // namespace

// ---- elementwise ------------------------------------------------------------

DOUBLE_API aclnnStatus aclnnAddGetWorkspaceSize(
    const aclTensor* self, const aclTensor* other, const aclScalar* alpha,
    aclTensor* out, uint64_t* workspaceSize, aclOpExecutor** executor) {
  return BinaryGetWorkspaceSize("aclnnAdd", Binary::kAdd, self, other, alpha,
                                out, workspaceSize, executor);
}
DOUBLE_PHASE2(Add)

DOUBLE_API aclnnStatus aclnnMulGetWorkspaceSize(const aclTensor* self,
                                                const aclTensor* other,
                                                aclTensor* out,
                                                uint64_t* workspaceSize,
                                                aclOpExecutor** executor) {
  return BinaryGetWorkspaceSize("aclnnMul", Binary::kMul, self, other, nullptr,
                                out, workspaceSize, executor);
}
DOUBLE_PHASE2(Mul)

DOUBLE_API aclnnStatus aclnnCastGetWorkspaceSize(const aclTensor* self,
                                                 const int32_t dtype,
                                                 aclTensor* out,
                                                 uint64_t* workspaceSize,
                                                 aclOpExecutor** executor) {
  OpBuilder b("aclnnCast", workspaceSize, executor);
  const int s = b.In(self, "self");
  const int o = b.Out(out, "out");
  if (!b.ok()) return b.Launch(0, nullptr);
  b.Check(ItemSize(dtype) != 0 && b.V(o).dtype == dtype, kParamInvalid,
          "out dtype " + DtypeName(b.V(o).dtype) + " is not dtype " +
              DtypeName(dtype));
  b.Check(b.V(o).dims == b.V(s).dims, kParamInvalid,
          "out shape " + ShapeText(b.V(o).dims) + " differs from self " +
              ShapeText(b.V(s).dims));
  return b.Launch(kElementwiseWorkspace, [=](const std::vector<TensorView>& v) {
    const auto os = Offsets(v[s]);
    const auto oo = Offsets(v[o]);
    for (size_t i = 0; i < oo.size(); ++i)
      CopyElement(v[o], oo[i], v[s], os[i]);
    return kSuccess;
  });
}
DOUBLE_PHASE2(Cast)

DOUBLE_API aclnnStatus aclnnCatGetWorkspaceSize(const aclTensorList* tensors,
                                                int64_t dim, aclTensor* out,
                                                uint64_t* workspaceSize,
                                                aclOpExecutor** executor) {
  OpBuilder b("aclnnCat", workspaceSize, executor);
  int count = 0;
  const int first = b.InList(tensors, "tensors", &count);
  const int o = b.Out(out, "out");
  if (!b.ok()) return b.Launch(0, nullptr);
  b.Check(count > 0, kParamInvalid, "tensors is empty");
  if (!b.ok()) return b.Launch(0, nullptr);
  const TensorView& vo = b.V(o);
  const int64_t ndim = b.V(first).Dim();
  const int64_t d = NormalizeDim(dim, ndim);
  b.Check(d >= 0, kParamInvalid,
          "dim " + std::to_string(dim) + " out of range for ndim " +
              std::to_string(ndim));
  if (!b.ok()) return b.Launch(0, nullptr);
  Dims reference = b.V(first).dims;  // every input's shape outside dim
  reference[d] = 0;
  Dims expected = reference;
  int32_t promoted = b.V(first).dtype;
  for (int i = 0; i < count; ++i) {
    const TensorView& t = b.V(first + i);
    Dims other = t.dims;
    if (t.Dim() == ndim) other[d] = 0;
    b.Check(t.Dim() == ndim && other == reference, kParamInvalid,
            "tensors[" + std::to_string(i) + "] shape " + ShapeText(t.dims) +
                " does not match the others outside dim " + std::to_string(d));
    if (t.Dim() == ndim) expected[d] += t.dims[d];
    promoted = PromoteTypes(promoted, t.dtype);
  }
  b.Check(
      vo.dims == expected, kParamInvalid,
      "out shape " + ShapeText(vo.dims) + " must be " + ShapeText(expected));
  b.Check(CanCast(promoted, vo.dtype), kParamInvalid,
          "inputs' dtype " + DtypeName(promoted) + " cannot be cast to out " +
              DtypeName(vo.dtype));
  return b.Launch(kElementwiseWorkspace * 2,
                  [=](const std::vector<TensorView>& v) {
                    int64_t start = 0;
                    for (int i = 0; i < count; ++i) {
                      const TensorView& in = v[first + i];
                      TensorView part = v[o];
                      part.dims[d] = in.dims[d];
                      part.offset += start * part.strides[d];
                      start += in.dims[d];
                      const auto oi = Offsets(in);
                      const auto op = Offsets(part);
                      for (size_t e = 0; e < oi.size(); ++e) {
                        CopyElement(part, op[e], in, oi[e]);
                      }
                    }
                    return kSuccess;
                  });
}
DOUBLE_PHASE2(Cat)

// ---- norms ------------------------------------------------------------------

DOUBLE_API aclnnStatus aclnnRmsNormGetWorkspaceSize(
    const aclTensor* x, const aclTensor* gamma, double epsilon,
    const aclTensor* yOut, const aclTensor* rstdOut, uint64_t* workspaceSize,
    aclOpExecutor** executor) {
  OpBuilder b("aclnnRmsNorm", workspaceSize, executor);
  const int sx = b.In(x, "x");
  const int sg = b.In(gamma, "gamma");
  const int sy = b.Out(yOut, "yOut");
  const int sr = b.Out(rstdOut, "rstdOut");
  if (!b.ok()) return b.Launch(0, nullptr);
  CheckGamma(b, b.V(sx), b.V(sg));
  if (!b.ok()) return b.Launch(0, nullptr);
  CheckSame(b, b.V(sy), b.V(sx), "yOut");
  CheckRstd(b, b.V(sx), b.V(sg).dims.size(), b.V(sr));
  return b.Launch(kReductionWorkspace, [=](const std::vector<TensorView>& v) {
    return RmsNormRows(v, sx, -1, sg, epsilon, sy, sr, -1);
  });
}
DOUBLE_PHASE2(RmsNorm)

DOUBLE_API aclnnStatus aclnnAddRmsNormGetWorkspaceSize(
    const aclTensor* x1, const aclTensor* x2, const aclTensor* gamma,
    double epsilon, aclTensor* yOut, aclTensor* rstdOut, aclTensor* xOut,
    uint64_t* workspaceSize, aclOpExecutor** executor) {
  OpBuilder b("aclnnAddRmsNorm", workspaceSize, executor);
  const int s1 = b.In(x1, "x1");
  const int s2 = b.In(x2, "x2");
  const int sg = b.In(gamma, "gamma");
  const int sy = b.Out(yOut, "yOut");
  const int sr = b.Out(rstdOut, "rstdOut");
  const int sx = b.Out(xOut, "xOut");
  if (!b.ok()) return b.Launch(0, nullptr);
  CheckSame(b, b.V(s2), b.V(s1), "x2");
  CheckGamma(b, b.V(s1), b.V(sg));
  if (!b.ok()) return b.Launch(0, nullptr);
  CheckSame(b, b.V(sy), b.V(s1), "yOut");
  CheckSame(b, b.V(sx), b.V(s1), "xOut");
  CheckRstd(b, b.V(s1), b.V(sg).dims.size(), b.V(sr));
  return b.Launch(kReductionWorkspace, [=](const std::vector<TensorView>& v) {
    return RmsNormRows(v, s1, s2, sg, epsilon, sy, sr, sx);
  });
}
DOUBLE_PHASE2(AddRmsNorm)

DOUBLE_API aclnnStatus aclnnInplaceAddRmsNormGetWorkspaceSize(
    aclTensor* x1Ref, aclTensor* x2Ref, const aclTensor* gamma, double epsilon,
    const aclTensor* rstdOut, uint64_t* workspaceSize,
    aclOpExecutor** executor) {
  OpBuilder b("aclnnInplaceAddRmsNorm", workspaceSize, executor);
  const int s1 = b.Ref(x1Ref, "x1Ref");
  const int s2 = b.Ref(x2Ref, "x2Ref");
  const int sg = b.In(gamma, "gamma");
  const int sr = b.Out(rstdOut, "rstdOut");
  if (!b.ok()) return b.Launch(0, nullptr);
  CheckSame(b, b.V(s2), b.V(s1), "x2Ref");
  CheckGamma(b, b.V(s1), b.V(sg));
  if (!b.ok()) return b.Launch(0, nullptr);
  CheckRstd(b, b.V(s1), b.V(sg).dims.size(), b.V(sr));
  // x1Ref <- the normalized result, x2Ref <- the residual sum.
  return b.Launch(kReductionWorkspace, [=](const std::vector<TensorView>& v) {
    return RmsNormRows(v, s1, s2, sg, epsilon, s1, sr, s2);
  });
}
DOUBLE_PHASE2(InplaceAddRmsNorm)

// ---- activations and softmax
// -------------------------------------------------

DOUBLE_API aclnnStatus aclnnSwiGluGetWorkspaceSize(const aclTensor* x,
                                                   int64_t dim,
                                                   const aclTensor* out,
                                                   uint64_t* workspaceSize,
                                                   aclOpExecutor** executor) {
  OpBuilder b("aclnnSwiGlu", workspaceSize, executor);
  const int sx = b.In(x, "x");
  const int so = b.Out(out, "out");
  if (!b.ok()) return b.Launch(0, nullptr);
  const TensorView& vx = b.V(sx);
  CheckFloatIn(b, vx, "x");
  const int64_t d = NormalizeDim(dim, vx.Dim());
  b.Check(d >= 0 && vx.dims[d] % 2 == 0 && vx.dims[d] > 0, kParamInvalid,
          "dim " + std::to_string(dim) + " of " + ShapeText(vx.dims) +
              " must exist and have an even, nonzero size");
  if (!b.ok()) return b.Launch(0, nullptr);
  TensorView half = vx;
  half.dims[d] /= 2;
  CheckSame(b, b.V(so), half, "out");
  // aclnnSwiGlu.md: x and out must be contiguous (non-contiguous "x").
  b.Check(vx.IsContiguous() && b.V(so).IsContiguous(), kParamInvalid,
          "x and out must be contiguous tensors");
  return b.Launch(kElementwiseWorkspace, [=](const std::vector<TensorView>& v) {
    TensorView gate = v[sx];
    gate.dims[d] /= 2;
    const int64_t shift = gate.dims[d] * gate.strides[d];
    const auto og = Offsets(gate);
    const auto oo = Offsets(v[so]);
    for (size_t i = 0; i < oo.size(); ++i) {
      // The FIRST half is the gate: silu(x[..., :d]) * x[..., d:].
      const double a = LoadDouble(gate, og[i]);
      const double up = LoadDouble(gate, og[i] + shift);
      StoreDouble(v[so], oo[i], a / (1 + std::exp(-a)) * up);
    }
    return kSuccess;
  });
}
DOUBLE_PHASE2(SwiGlu)

DOUBLE_API aclnnStatus aclnnSiluGetWorkspaceSize(const aclTensor* self,
                                                 aclTensor* out,
                                                 uint64_t* workspaceSize,
                                                 aclOpExecutor** executor) {
  OpBuilder b("aclnnSilu", workspaceSize, executor);
  const int s = b.In(self, "self");
  const int o = b.Out(out, "out");
  if (!b.ok()) return b.Launch(0, nullptr);
  CheckFloatIn(b, b.V(s), "self");
  CheckSame(b, b.V(o), b.V(s), "out");
  return b.Launch(kElementwiseWorkspace, [=](const std::vector<TensorView>& v) {
    const auto os = Offsets(v[s]);
    const auto oo = Offsets(v[o]);
    for (size_t i = 0; i < oo.size(); ++i) {
      const double a = LoadDouble(v[s], os[i]);
      StoreDouble(v[o], oo[i], a / (1 + std::exp(-a)));
    }
    return kSuccess;
  });
}
DOUBLE_PHASE2(Silu)

DOUBLE_API aclnnStatus aclnnSoftmaxGetWorkspaceSize(const aclTensor* self,
                                                    int64_t dim, aclTensor* out,
                                                    uint64_t* workspaceSize,
                                                    aclOpExecutor** executor) {
  OpBuilder b("aclnnSoftmax", workspaceSize, executor);
  const int s = b.In(self, "self");
  const int o = b.Out(out, "out");
  if (!b.ok()) return b.Launch(0, nullptr);
  CheckFloatIn(b, b.V(s), "self");
  const int64_t d = NormalizeDim(dim, std::max<int64_t>(b.V(s).Dim(), 1));
  b.Check(d >= 0, kParamInvalid,
          "dim " + std::to_string(dim) + " out of range");
  b.Check(b.V(o).dims == b.V(s).dims && IsHalfOrFloat(b.V(o).dtype),
          kParamInvalid, "out must have self's shape and a float dtype");
  return b.Launch(kReductionWorkspace, [=](const std::vector<TensorView>& v) {
    if (v[s].Dim() == 0) {  // softmax of a scalar is 1
      StoreDouble(v[o], v[o].offset, 1.0);
      return kSuccess;
    }
    TensorView in_rows = v[s];
    TensorView out_rows = v[o];
    const int64_t n = in_rows.dims[d];
    in_rows.dims[d] = 1;
    out_rows.dims[d] = 1;
    const auto is = Offsets(in_rows);
    const auto os = Offsets(out_rows);
    std::vector<double> row(n);
    for (size_t r = 0; r < is.size(); ++r) {
      double max = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < n; ++j) {
        row[j] = LoadDouble(v[s], is[r] + j * v[s].strides[d]);
        max = std::max(max, row[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        // A row of -inf gives NaN, as torch.softmax does.
        row[j] = std::exp(row[j] - max);
        sum += row[j];
      }
      for (int64_t j = 0; j < n; ++j) {
        StoreDouble(v[o], os[r] + j * v[o].strides[d], row[j] / sum);
      }
    }
    return kSuccess;
  });
}
DOUBLE_PHASE2(Softmax)

DOUBLE_API aclnnStatus aclnnInplaceMaskedFillScalarGetWorkspaceSize(
    aclTensor* selfRef, const aclTensor* mask, const aclScalar* value,
    uint64_t* workspaceSize, aclOpExecutor** executor) {
  OpBuilder b("aclnnInplaceMaskedFillScalar", workspaceSize, executor);
  const int s = b.Ref(selfRef, "selfRef");
  const int m = b.In(mask, "mask");
  const aclScalar* sv = b.Scalar(value, "value");
  if (!b.ok()) return b.Launch(0, nullptr);
  b.Check(b.V(m).dtype == kBool, kParamInvalid,
          "mask dtype must be BOOL, got " + DtypeName(b.V(m).dtype));
  b.Check(BroadcastsTo(b.V(m).dims, b.V(s).dims), kParamInvalid,
          "mask shape " + ShapeText(b.V(m).dims) + " does not broadcast to " +
              ShapeText(b.V(s).dims));
  const double fill = ScalarValue(sv);
  const int64_t fill_int = sv->int_value;
  const bool exact_int = !IsFloating(sv->dtype);
  return b.Launch(kElementwiseWorkspace, [=](const std::vector<TensorView>& v) {
    const auto os = Offsets(v[s]);
    const auto om = BroadcastOffsets(v[m], v[s].dims);
    for (size_t i = 0; i < os.size(); ++i) {
      if (LoadDouble(v[m], om[i]) == 0) continue;
      if (exact_int) {
        StoreInt(v[s], os[i], fill_int);
      } else {
        StoreDouble(v[s], os[i], fill);
      }
    }
    return kSuccess;
  });
}
DOUBLE_PHASE2(InplaceMaskedFillScalar)

DOUBLE_API aclnnStatus aclnnInplaceCopyGetWorkspaceSize(
    aclTensor* selfRef, const aclTensor* src, uint64_t* workspaceSize,
    aclOpExecutor** executor) {
  OpBuilder b("aclnnInplaceCopy", workspaceSize, executor);
  const int s = b.Ref(selfRef, "selfRef");
  const int c = b.In(src, "src");
  if (!b.ok()) return b.Launch(0, nullptr);
  b.Check(BroadcastsTo(b.V(c).dims, b.V(s).dims), kParamInvalid,
          "src shape " + ShapeText(b.V(c).dims) + " does not broadcast to " +
              ShapeText(b.V(s).dims));
  return b.Launch(kElementwiseWorkspace, [=](const std::vector<TensorView>& v) {
    const auto os = Offsets(v[s]);
    const auto oc = BroadcastOffsets(v[c], v[s].dims);
    // src may overlap self: read everything before writing.
    alignas(8) std::vector<unsigned char> staging(oc.size() * 8);
    TensorView stage = v[c];
    stage.data = staging.data();
    for (size_t i = 0; i < oc.size(); ++i) CopyElement(stage, i, v[c], oc[i]);
    for (size_t i = 0; i < os.size(); ++i) CopyElement(v[s], os[i], stage, i);
    return kSuccess;
  });
}
DOUBLE_PHASE2(InplaceCopy)

// ---- matrix products --------------------------------------------------------

DOUBLE_API aclnnStatus aclnnMatmulGetWorkspaceSize(
    const aclTensor* self, const aclTensor* mat2, aclTensor* out,
    int8_t cubeMathType, uint64_t* workspaceSize, aclOpExecutor** executor) {
  return GemmGetWorkspaceSize("aclnnMatmul", nullptr, self, mat2, nullptr,
                              nullptr, out, cubeMathType, 0, workspaceSize,
                              executor);
}
DOUBLE_PHASE2(Matmul)

DOUBLE_API aclnnStatus aclnnMmGetWorkspaceSize(
    const aclTensor* self, const aclTensor* mat2, aclTensor* out,
    int8_t cubeMathType, uint64_t* workspaceSize, aclOpExecutor** executor) {
  return GemmGetWorkspaceSize("aclnnMm", nullptr, self, mat2, nullptr, nullptr,
                              out, cubeMathType, 2, workspaceSize, executor);
}
DOUBLE_PHASE2(Mm)

DOUBLE_API aclnnStatus aclnnAddmmGetWorkspaceSize(
    const aclTensor* self, const aclTensor* mat1, const aclTensor* mat2,
    const aclScalar* beta, const aclScalar* alpha, aclTensor* out,
    int8_t cubeMathType, uint64_t* workspaceSize, aclOpExecutor** executor) {
  return GemmGetWorkspaceSize("aclnnAddmm", self, mat1, mat2, beta, alpha, out,
                              cubeMathType, 2, workspaceSize, executor);
}
DOUBLE_PHASE2(Addmm)

DOUBLE_API aclnnStatus aclnnBaddbmmGetWorkspaceSize(
    const aclTensor* self, const aclTensor* batch1, const aclTensor* batch2,
    const aclScalar* beta, const aclScalar* alpha, aclTensor* out,
    int8_t cubeMathType, uint64_t* workspaceSize, aclOpExecutor** executor) {
  return GemmGetWorkspaceSize("aclnnBaddbmm", self, batch1, batch2, beta, alpha,
                              out, cubeMathType, 3, workspaceSize, executor);
}
DOUBLE_PHASE2(Baddbmm)
