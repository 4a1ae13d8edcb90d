// The oneDNN path of onednn.h: the library loaded on first use, the cache
// of matmul primitives, and Gemm's choice of layout and post-ops. A build
// without oneDNN's headers gets the stubs below instead.
#include "cpu/kernels/gemm/onednn.h"

#ifndef POLYOPS_WITH_ONEDNN

namespace polyops::cpu::onednn {

Info GetInfo() {
  Info info;
  info.reason =
      "polyops was built without oneDNN (CMake POLYOPS_ONEDNN=OFF, or AUTO "
      "without the onednn-devel-cpu-gomp headers)";
  return info;
}
void SetLibraryPath(const std::string&) {}
bool HasAvx512() { return false; }
bool HasAvx2() { return false; }
bool HasAvx512Bf16() { return false; }
bool Gemm(const char*, const GemmLayout&, DataType, float, float, const void*,
          const void*, const void*, void*) {
  return false;
}

}  // namespace polyops::cpu::onednn

#else  // POLYOPS_WITH_ONEDNN

#include <oneapi/dnnl/dnnl.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "cpu/kernels/gemm/onednn_library.h"
#include "cpu/kernels/gemm/onednn_primitive.h"
#include "cpu/runtime/parallel.h"

namespace polyops::cpu::onednn {
namespace {

// The primitive's identity: dtype, dims and strides of src, weights and
// dst, the alpha/beta post-ops (float bits).
using Key = std::array<int64_t, 24>;

// oneDNN caches primitives itself, but creating the primitive descriptor
// (which the lookup needs) costs more than a small product; polyops keeps
// the last kCacheCapacity primitives it created, least recently used out.
constexpr size_t kCacheCapacity = 64;

struct CacheEntry {
  Key key;
  std::shared_ptr<const Primitive> primitive;
  uint64_t last_use;
};

struct State {
  std::mutex mutex;
  std::string path;
  std::shared_ptr<const Library> library;  // null until the first use
  std::vector<CacheEntry> cache;
  uint64_t clock = 0;
};

State& GlobalState() {
  static State* state = new State;  // used until exit
  return *state;
}

std::shared_ptr<const Library> Loaded() {
  State& state = GlobalState();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (!state.library) state.library = Load(state.path);
  return state.library;
}

thread_local std::shared_ptr<const Primitive> t_last_primitive;
thread_local std::string t_declined;

// Why `primitive` cannot run: oneDNN has nothing, or only a reference loop.
std::string DeclinedReason(const Primitive& primitive) {
  return primitive.impl.empty() ? "unimplemented" : primitive.impl;
}

Matrix Oriented(const GemmMatrix& matrix, const BlasView& view, int64_t batch,
                int64_t rows, int64_t cols, bool transpose) {
  int64_t row_stride = view.trans ? 1 : view.ld;
  int64_t col_stride = view.trans ? view.ld : 1;
  if (transpose) {
    std::swap(rows, cols);
    std::swap(row_stride, col_stride);
  }
  const bool shared = batch == 1 || matrix.batch_stride == 0;
  return Matrix{shared ? 1 : batch,
                rows,
                cols,
                shared ? rows * cols : matrix.batch_stride,
                row_stride,
                col_stride};
}

dnnl_data_type_t ToDnnl(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return dnnl_f32;
    case DataType::kBFloat16:
      return dnnl_bf16;
    case DataType::kFloat16:
      return dnnl_f16;
    default:
      return dnnl_data_type_undef;
  }
}

int64_t FloatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

std::shared_ptr<const Primitive> Find(
    const std::shared_ptr<const Library>& library, const Key& key) {
  State& state = GlobalState();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (state.library != library) return nullptr;
  for (CacheEntry& entry : state.cache) {
    if (entry.key == key) {
      entry.last_use = ++state.clock;
      return entry.primitive;
    }
  }
  return nullptr;
}

void Insert(const std::shared_ptr<const Library>& library, const Key& key,
            std::shared_ptr<const Primitive> primitive) {
  State& state = GlobalState();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (state.library != library) return;  // the library was replaced meanwhile
  if (state.cache.size() >= kCacheCapacity) {
    auto oldest = state.cache.begin();
    for (auto it = state.cache.begin(); it != state.cache.end(); ++it) {
      if (it->last_use < oldest->last_use) oldest = it;
    }
    state.cache.erase(oldest);
  }
  state.cache.push_back(CacheEntry{key, std::move(primitive), ++state.clock});
}

// out = c (broadcast per c's strides), element by element in out's dtype:
// the sum post-op then adds beta * out.
template <typename Unit>
void CopyC(const GemmLayout& l, const void* c, void* out) {
  const Unit* src = static_cast<const Unit*>(c);
  Unit* dst = static_cast<Unit*>(out);
  const bool parallel = l.batch * l.m * l.n >= kParallelGrain;
  ParallelFor(l.batch * l.m, parallel, [&](int64_t row) {
    const int64_t i = row / l.m;
    const int64_t r = row % l.m;
    const Unit* from = src + i * l.c.batch_stride + r * l.c.row_stride;
    Unit* to = dst + i * l.out.batch_stride + r * l.out.row_stride;
    for (int64_t j = 0; j < l.n; ++j) {
      to[j * l.out.col_stride] = from[j * l.c.col_stride];
    }
  });
}

// The primitive for these operands and post-ops, from the cache or made.
std::shared_ptr<const Primitive> Lookup(
    const std::shared_ptr<const Library>& library, const char* op,
    dnnl_data_type_t dt, int ndims, const std::array<Matrix, 3>& operands,
    float alpha, bool use_sum, float beta) {
  Key key{};
  size_t at = 0;
  key[at++] = static_cast<int64_t>(dt);
  key[at++] = ndims;
  for (const Matrix& m : operands) {
    for (int64_t value : {m.batch, m.rows, m.cols, m.batch_stride, m.row_stride,
                          m.col_stride}) {
      key[at++] = value;
    }
  }
  key[at++] = FloatBits(alpha);
  key[at++] = use_sum ? FloatBits(beta) : -1;
  std::shared_ptr<const Primitive> primitive = Find(library, key);
  if (!primitive) {
    primitive =
        CreatePrimitive(library, op, dt, ndims, operands, alpha, use_sum, beta);
    Insert(library, key, primitive);
  }
  return primitive;
}

// ExecutePrimitive, then `primitive` is this thread's last (GetInfo).
void Execute(const Library& library, const char* op,
             std::shared_ptr<const Primitive> primitive, const void* src,
             const void* weights, void* dst) {
  ExecutePrimitive(library, op, *primitive, src, weights, dst);
  t_last_primitive = std::move(primitive);
}

// out = alpha * product (+ beta * c when use_sum), float32, where product
// holds a @ b in dst's orientation (transpose: out^T), dense per batch.
void ScaleProduct(const GemmLayout& l, bool transpose, float alpha,
                  bool use_sum, float beta, const float* product,
                  const float* c, float* out) {
  const bool parallel = l.batch * l.m * l.n >= kParallelGrain;
  ParallelFor(l.batch * l.m, parallel, [&](int64_t row) {
    const int64_t i = row / l.m;
    const int64_t r = row % l.m;
    const float* p = product + i * l.m * l.n;
    const int64_t p_row = transpose ? 1 : l.n;
    const int64_t p_col = transpose ? l.m : 1;
    float* to = out + i * l.out.batch_stride + r * l.out.row_stride;
    const float* from =
        use_sum ? c + i * l.c.batch_stride + r * l.c.row_stride : nullptr;
    for (int64_t j = 0; j < l.n; ++j) {
      float value = alpha * p[r * p_row + j * p_col];
      if (use_sum) value = value + beta * from[j * l.c.col_stride];
      to[j * l.out.col_stride] = value;
    }
  });
}

}  // namespace

Info GetInfo() {
  Info info = Loaded()->info;
  if (t_last_primitive) info.last_impl = t_last_primitive->impl;
  info.declined = t_declined;
  return info;
}

void SetLibraryPath(const std::string& path) {
  State& state = GlobalState();
  std::vector<CacheEntry> dropped;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    state.path = path;
    state.library.reset();
    dropped.swap(state.cache);
  }
}

bool HasAvx512() {
  const std::shared_ptr<const Library> library = Loaded();
  return library->info.available && library->avx512;
}

bool HasAvx2() {
  const std::shared_ptr<const Library> library = Loaded();
  return library->info.available && library->avx2;
}

bool HasAvx512Bf16() {
  const std::shared_ptr<const Library> library = Loaded();
  return library->info.available && library->bf16;
}

bool Gemm(const char* op, const GemmLayout& l, DataType dtype, float alpha,
          float beta, const void* a, const void* b, const void* c, void* out) {
  const std::shared_ptr<const Library> library = Loaded();
  const dnnl_data_type_t dt = ToDnnl(dtype);
  t_declined.clear();
  if (!library->info.available) {
    t_declined = "unavailable";
    return false;
  }
  if (dt == dnnl_data_type_undef) {
    t_declined = "data type";
    return false;
  }
  // oneDNN writes dst row-major; a column-major out is computed as its
  // transpose, out^T = b^T a^T.
  const bool transpose = l.out_blas.trans;
  Matrix src = Oriented(l.a, l.a_blas, l.batch, l.m, l.k, transpose);
  Matrix weights = Oriented(l.b, l.b_blas, l.batch, l.k, l.n, transpose);
  if (transpose) std::swap(src, weights);
  const Matrix dst = Oriented(l.out, l.out_blas, l.batch, l.m, l.n, transpose);
  const int ndims = l.batch > 1 ? 3 : 2;
  const bool use_sum = l.has_c && beta != 0.0f;
  const void* src_data = transpose ? b : a;
  const void* weights_data = transpose ? a : b;
  std::shared_ptr<const Primitive> primitive =
      Lookup(library, op, dt, ndims, {src, weights, dst}, alpha, use_sum, beta);
  if (primitive->handle != nullptr) {
    if (use_sum && c != out) {
      if (dtype == DataType::kFloat32) {
        CopyC<uint32_t>(l, c, out);
      } else {
        CopyC<uint16_t>(l, c, out);
      }
    }
    Execute(*library, op, std::move(primitive), src_data, weights_data, out);
    return true;
  }
  t_declined = DeclinedReason(*primitive);
  if (dtype != DataType::kFloat32 || (alpha == 1.0f && !use_sum)) return false;
  // The post-ops have only oneDNN's reference kernels here (alpha and beta
  // on AVX2 CPUs, oneDNN 3.2), the plain product may not: that into a dense
  // buffer, then alpha and beta in one pass of float32 multiplies and adds
  // (the post-ops' arithmetic).
  const Matrix dense{dst.batch,           dst.rows, dst.cols,
                     dst.rows * dst.cols, dst.cols, 1};
  primitive =
      Lookup(library, op, dt, ndims, {src, weights, dense}, 1.0f, false, 0.0f);
  if (primitive->handle == nullptr) {
    t_declined = DeclinedReason(*primitive);
    return false;
  }
  t_declined.clear();
  std::unique_ptr<float[]> product(new float[l.batch * l.m * l.n]);
  Execute(*library, op, std::move(primitive), src_data, weights_data,
          product.get());
  ScaleProduct(l, transpose, alpha, use_sum, beta, product.get(),
               static_cast<const float*>(c), static_cast<float*>(out));
  return true;
}

}  // namespace polyops::cpu::onednn

#endif  // POLYOPS_WITH_ONEDNN
