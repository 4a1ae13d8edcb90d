// Compiled only where cuBLAS was found (POLYOPS_WITH_CUBLAS,
// docs/backends/cuda.md).
#ifdef POLYOPS_WITH_CUBLAS

#include <algorithm>
#include <limits>
#include <mutex>
#include <optional>
#include <vector>

#include "core/dispatch.h"
#include "core/error.h"
#include "cuda/kernels/gemm/blas.h"
#include "cuda/runtime/common.cuh"

namespace polyops::cuda {
namespace {

// cuBLAS(Lt) handles are expensive to create (cublasCreate allocates device
// memory), so each thread keeps one per device and hands it back to a
// process-wide free list when it exits; a later thread reuses it. Handles
// are never destroyed: at process exit the CUDA context may already be gone.
template <typename H>
class HandlePool {
 public:
  using CreateFn = cublasStatus_t (*)(H*);

  explicit HandlePool(CreateFn create) : create_(create) {}

  // The calling thread's handle for `device` (the current CUDA device).
  H Get(int device, const char* op) {
    thread_local Lease lease(this);
    if (static_cast<size_t>(device) >= lease.handles.size()) {
      lease.handles.resize(device + 1, nullptr);
    }
    H& handle = lease.handles[device];
    if (handle == nullptr) handle = Acquire(device, op);
    return handle;
  }

 private:
  struct Lease {
    explicit Lease(HandlePool* owner) : pool(owner) {}
    ~Lease() {
      std::lock_guard<std::mutex> lock(pool->mutex_);
      for (size_t device = 0; device < handles.size(); ++device) {
        if (handles[device] != nullptr) {
          pool->free_[device].push_back(handles[device]);
        }
      }
    }
    HandlePool* pool;
    std::vector<H> handles;
  };

  H Acquire(int device, const char* op) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (static_cast<size_t>(device) >= free_.size()) {
        free_.resize(device + 1);
      }
      if (!free_[device].empty()) {
        H handle = free_[device].back();
        free_[device].pop_back();
        return handle;
      }
    }
    H handle = nullptr;
    CheckBlas(create_(&handle), op, "creating a cuBLAS handle");
    return handle;
  }

  CreateFn create_;
  std::mutex mutex_;
  std::vector<std::vector<H>> free_;  // by device
};

cublasStatus_t CreateCublas(cublasHandle_t* handle) {
  cublasStatus_t status = cublasCreate(handle);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  // float16/bfloat16 products accumulate in float32 end to end, as on CPU:
  // no split-k reduction in the 16-bit output type.
  return cublasSetMathMode(
      *handle, static_cast<cublasMath_t>(
                   CUBLAS_DEFAULT_MATH |
                   CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
}

cublasHandle_t CublasHandle(int device, const char* op) {
  static auto* pool = new HandlePool<cublasHandle_t>(&CreateCublas);
  return pool->Get(device, op);
}

cublasLtHandle_t CublasLtHandle(int device, const char* op) {
  static auto* pool = new HandlePool<cublasLtHandle_t>(&cublasLtCreate);
  return pool->Get(device, op);
}

cudaDataType_t CudaDataType(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat16:
      return CUDA_R_16F;
    case DataType::kBFloat16:
      return CUDA_R_16BF;
    default:
      return CUDA_R_32F;
  }
}

// The workspace cuBLAS may use per call, as torch sizes it: Hopper's
// kernels want 32 MiB, older GPUs do with 8 MiB.
size_t WorkspaceBytes(int device, const char* op) {
  int major = 0;
  Check(
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
      op, "reading the compute capability");
  return major >= 9 ? size_t{32} << 20 : size_t{8} << 20;
}

int AlignmentOf(const void* pointer) {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  for (int bytes = 16; bytes > 1; bytes /= 2) {
    if (address % bytes == 0) return bytes;
  }
  return 1;
}

// out[i, r, j] = scale ? factor * c[i, r, j] : c[i, r, j], or 0 without c
// (c broadcasts through stride-0 dims). Blocks stride over the batch * m
// output rows, threads over a row's n columns.
template <typename T>
__global__ void FillFromC(int64_t rows, int64_t m, int64_t n, const T* c,
                          GemmMatrix c_at, bool scale, float factor, T* out,
                          GemmMatrix out_at) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t i = row / m;
    const int64_t r = row % m;
    T* dst = out + i * out_at.batch_stride + r * out_at.row_stride;
    const T* src = c == nullptr
                       ? nullptr
                       : c + i * c_at.batch_stride + r * c_at.row_stride;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      float value = 0.0f;
      if (src != nullptr) {
        value = ToFloat(src[j * c_at.col_stride]);
        if (scale) value = __fmul_rn(factor, value);
      }
      dst[j * out_at.col_stride] = FromFloat<T>(value);
    }
  }
}

void LaunchFill(const char* op, const GemmLayout& l, DataType dtype,
                const void* c, bool scale, float factor, void* out,
                cudaStream_t stream) {
  const int64_t rows = l.batch * l.m;
  const int threads =
      static_cast<int>(std::min<int64_t>(256, (l.n + 31) / 32 * 32));
  const auto blocks =
      static_cast<unsigned>(std::min<int64_t>(rows, int64_t{1} << 20));
  DispatchDataType<POLYOPS_FLOAT_TYPES>(dtype, op, [&](auto tag) {
    using T = NativeT<typename decltype(tag)::type>;
    FillFromC<T><<<blocks, threads, 0, stream>>>(
        rows, l.m, l.n, static_cast<const T*>(c), l.c, scale, factor,
        static_cast<T*>(out), l.out);
  });
  CheckLaunch(op);
}

}  // namespace

void CheckBlas(cublasStatus_t status, const char* op, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw BackendError(detail::Concat(
      "polyops.", op, ": ", what, " failed: ", cublasGetStatusString(status),
      " (cuBLAS status ", static_cast<int>(status), ")"));
}

struct BlasGemm::LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t first = nullptr;
  cublasLtMatrixLayout_t second = nullptr;
  cublasLtMatrixLayout_t out = nullptr;
  // The best algorithm when every matrix is 16-byte aligned, and one that
  // needs only element alignment (a sliced tensor's data pointer).
  cublasLtMatmulAlgo_t aligned_algo{};
  size_t aligned_workspace = 0;
  bool has_aligned = false;
  cublasLtMatmulAlgo_t any_algo{};
  size_t any_workspace = 0;

  ~LtPlan() {
    if (out != nullptr) cublasLtMatrixLayoutDestroy(out);
    if (second != nullptr) cublasLtMatrixLayoutDestroy(second);
    if (first != nullptr) cublasLtMatrixLayoutDestroy(first);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

BlasGemm::BlasGemm(const char* op, BlasLibrary library,
                   const GemmLayout& layout, DataType dtype, double alpha,
                   double beta)
    : op_(op),
      library_(library),
      layout_(layout),
      dtype_(dtype),
      alpha_(static_cast<float>(alpha)),
      beta_(static_cast<float>(beta)) {
  const GemmLayout& l = layout_;
  if (l.batch == 0 || l.m == 0 || l.n == 0) return;
  POLYOPS_CHECK_T(l.batch <= std::numeric_limits<int32_t>::max(),
                  NotImplemented, "polyops.", op, ": ",
                  library == BlasLibrary::kCublasLt ? "cublaslt" : "cublas",
                  " slot on cuda does not support a batch of ", l.batch,
                  " matrices because cuBLAS' batch count is a 32-bit int; "
                  "split the batch or run on cpu");
  Check(cudaGetDevice(&device_), op, "reading the current device");
  use_c_ = l.has_c && beta_ != 0.0f;
  fill_only_ = l.k == 0 || alpha_ == 0.0f;
  if (fill_only_) return;

  product_ = ColumnMajorProductOf(l);
  cublas_workspace_bytes_ = WorkspaceBytes(device_, op);
  if (library_ == BlasLibrary::kCublasLt) PlanLt();
}

BlasGemm::~BlasGemm() { delete lt_; }

void BlasGemm::PlanLt() {
  lt_ = new LtPlan;
  const cudaDataType_t type = CudaDataType(dtype_);
  const int batch = static_cast<int>(layout_.batch);
  CheckBlas(
      cublasLtMatmulDescCreate(&lt_->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), op_,
      "cublasLtMatmulDescCreate");
  const cublasOperation_t op_first =
      product_.first.transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second =
      product_.second.transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
  CheckBlas(
      cublasLtMatmulDescSetAttribute(lt_->desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                     &op_first, sizeof(op_first)),
      op_, "setting cuBLASLt TRANSA");
  CheckBlas(
      cublasLtMatmulDescSetAttribute(lt_->desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                     &op_second, sizeof(op_second)),
      op_, "setting cuBLASLt TRANSB");

  const auto make_layout = [&](cublasLtMatrixLayout_t* made, int64_t rows,
                               int64_t cols, int64_t ld, int64_t stride) {
    CheckBlas(cublasLtMatrixLayoutCreate(made, type, rows, cols, ld), op_,
              "cublasLtMatrixLayoutCreate");
    CheckBlas(
        cublasLtMatrixLayoutSetAttribute(
            *made, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch)),
        op_, "setting the cuBLASLt batch count");
    CheckBlas(cublasLtMatrixLayoutSetAttribute(
                  *made, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                  sizeof(stride)),
              op_, "setting the cuBLASLt batch stride");
  };
  // Stored (column-major) shapes: op(first) is rows x inner, op(second)
  // inner x cols.
  const ColumnMajorProduct& p = product_;
  make_layout(&lt_->first, p.first.transpose ? p.inner : p.rows,
              p.first.transpose ? p.rows : p.inner, p.first.ld,
              p.first.batch_stride);
  make_layout(&lt_->second, p.second.transpose ? p.cols : p.inner,
              p.second.transpose ? p.inner : p.cols, p.second.ld,
              p.second.batch_stride);
  make_layout(&lt_->out, p.rows, p.cols, p.out_ld, p.out_batch_stride);

  cublasLtHandle_t handle = CublasLtHandle(device_, op_);
  const int element = DataTypeSize(dtype_);
  const auto heuristic = [&](uint32_t alignment, cublasLtMatmulAlgo_t* algo,
                             size_t* workspace) {
    cublasLtMatmulPreference_t preference = nullptr;
    CheckBlas(cublasLtMatmulPreferenceCreate(&preference), op_,
              "cublasLtMatmulPreferenceCreate");
    const uint64_t max_workspace = cublas_workspace_bytes_;
    // Split-k partial sums stay in float32 (as the CPU's single float32
    // accumulation), never in the 16-bit output type.
    const uint32_t reductions =
        CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    cublasStatus_t status = cublasLtMatmulPreferenceSetAttribute(
        preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace,
        sizeof(max_workspace));
    if (status == CUBLAS_STATUS_SUCCESS) {
      status = cublasLtMatmulPreferenceSetAttribute(
          preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reductions,
          sizeof(reductions));
    }
    for (const auto attribute : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                 CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                 CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                 CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
      if (status != CUBLAS_STATUS_SUCCESS) break;
      status = cublasLtMatmulPreferenceSetAttribute(
          preference, attribute, &alignment, sizeof(alignment));
    }
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    if (status == CUBLAS_STATUS_SUCCESS) {
      status = cublasLtMatmulAlgoGetHeuristic(handle, lt_->desc, lt_->first,
                                              lt_->second, lt_->out, lt_->out,
                                              preference, 1, &result, &found);
    }
    cublasLtMatmulPreferenceDestroy(preference);
    // NOT_SUPPORTED means no algorithm for this alignment: not an error.
    if (status == CUBLAS_STATUS_NOT_SUPPORTED) return false;
    CheckBlas(status, op_, "cublasLtMatmulAlgoGetHeuristic");
    if (found == 0 || result.state != CUBLAS_STATUS_SUCCESS) return false;
    *algo = result.algo;
    *workspace = result.workspaceSize;
    return true;
  };
  // Every batch's matrices keep the first one's alignment only if the batch
  // strides are multiples of 16 bytes.
  bool strides_aligned = true;
  for (const int64_t stride :
       {p.first.batch_stride, p.second.batch_stride, p.out_batch_stride}) {
    strides_aligned = strides_aligned && (stride * element) % 16 == 0;
  }
  if (strides_aligned && element < 16) {
    lt_->has_aligned =
        heuristic(16, &lt_->aligned_algo, &lt_->aligned_workspace);
  }
  const bool has_any = heuristic(static_cast<uint32_t>(element), &lt_->any_algo,
                                 &lt_->any_workspace);
  POLYOPS_CHECK_T(has_any, NotImplemented, "polyops.", op_,
                  ": cublaslt slot on cuda does not support this layout "
                  "(m=",
                  layout_.m, ", n=", layout_.n, ", k=", layout_.k,
                  ", batch=", layout_.batch, ", dtype ", DataTypeName(dtype_),
                  ") because cublasLtMatmulAlgoGetHeuristic found no "
                  "algorithm for it; use implementation_index=1 (cublas)");
}

void BlasGemm::Run(const Handle& handle, const void* a, const void* b,
                   const void* c, void* out) const {
  const GemmLayout& l = layout_;
  if (l.batch == 0 || l.m == 0 || l.n == 0) return;
  const cudaStream_t stream = StreamOf(handle);
  if (fill_only_) {
    LaunchFill(op_, l, dtype_, use_c_ ? c : nullptr, true, beta_, out, stream);
    return;
  }
  if (use_c_ && c != out) {
    LaunchFill(op_, l, dtype_, c, false, 1.0f, out, stream);
  }
  const void* first = product_.first.from_a ? a : b;
  const void* second = product_.second.from_a ? a : b;
  if (library_ == BlasLibrary::kCublasLt) {
    RunLt(handle, first, second, out);
  } else {
    RunCublas(handle, first, second, out);
  }
}

void BlasGemm::RunLt(const Handle& handle, const void* first,
                     const void* second, void* out) const {
  const float beta = use_c_ ? beta_ : 0.0f;
  const bool aligned = lt_->has_aligned && AlignmentOf(first) == 16 &&
                       AlignmentOf(second) == 16 && AlignmentOf(out) == 16;
  const cublasLtMatmulAlgo_t& algo =
      aligned ? lt_->aligned_algo : lt_->any_algo;
  const size_t bytes = aligned ? lt_->aligned_workspace : lt_->any_workspace;
  // Most algorithms need no workspace: then none is taken.
  std::optional<Workspace> workspace;
  if (bytes > 0) workspace.emplace(handle, bytes, op_);
  CheckBlas(cublasLtMatmul(CublasLtHandle(handle.device.index, op_), lt_->desc,
                           &alpha_, first, lt_->first, second, lt_->second,
                           &beta, out, lt_->out, out, lt_->out, &algo,
                           workspace ? workspace->data() : nullptr, bytes,
                           StreamOf(handle)),
            op_, "cublasLtMatmul");
}

void BlasGemm::RunCublas(const Handle& handle, const void* first,
                         const void* second, void* out) const {
  const float beta = use_c_ ? beta_ : 0.0f;
  cublasHandle_t blas = CublasHandle(handle.device.index, op_);
  // cublasSetStream resets the workspace to cuBLAS' own pool, so the
  // workspace is set after it, from torch's allocator: no cudaMalloc during
  // a CUDA graph capture.
  CheckBlas(cublasSetStream(blas, StreamOf(handle)), op_, "cublasSetStream");
  Workspace workspace(handle, cublas_workspace_bytes_, op_);
  CheckBlas(cublasSetWorkspace(blas, workspace.data(), cublas_workspace_bytes_),
            op_, "cublasSetWorkspace");
  const cudaDataType_t type = CudaDataType(dtype_);
  CheckBlas(
      cublasGemmStridedBatchedEx(
          blas, product_.first.transpose ? CUBLAS_OP_T : CUBLAS_OP_N,
          product_.second.transpose ? CUBLAS_OP_T : CUBLAS_OP_N,
          static_cast<int>(product_.rows), static_cast<int>(product_.cols),
          static_cast<int>(product_.inner), &alpha_, first, type,
          static_cast<int>(product_.first.ld), product_.first.batch_stride,
          second, type, static_cast<int>(product_.second.ld),
          product_.second.batch_stride, &beta, out, type,
          static_cast<int>(product_.out_ld), product_.out_batch_stride,
          static_cast<int>(layout_.batch), CUBLAS_COMPUTE_32F,
          CUBLAS_GEMM_DEFAULT),
      op_, "cublasGemmStridedBatchedEx");
}

}  // namespace polyops::cuda

#endif  // POLYOPS_WITH_CUBLAS
