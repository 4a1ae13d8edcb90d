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

#include <dlfcn.h>
#include <oneapi/dnnl/dnnl.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "core/error.h"
#include "cpu/runtime/parallel.h"

namespace polyops::cpu::onednn {
namespace {

// Every oneDNN function polyops calls; the pointer types come from the
// declarations of the header the build found, so a signature change is a
// compile error, not a wrong call.
#define POLYOPS_DNNL_FUNCTIONS(X)         \
  X(dnnl_version)                         \
  X(dnnl_get_effective_cpu_isa)           \
  X(dnnl_engine_create)                   \
  X(dnnl_stream_create)                   \
  X(dnnl_stream_wait)                     \
  X(dnnl_memory_desc_create_with_strides) \
  X(dnnl_memory_desc_destroy)             \
  X(dnnl_memory_create)                   \
  X(dnnl_memory_destroy)                  \
  X(dnnl_primitive_attr_create)           \
  X(dnnl_primitive_attr_destroy)          \
  X(dnnl_primitive_attr_set_post_ops)     \
  X(dnnl_post_ops_create)                 \
  X(dnnl_post_ops_destroy)                \
  X(dnnl_post_ops_append_eltwise)         \
  X(dnnl_post_ops_append_sum)             \
  X(dnnl_matmul_primitive_desc_create)    \
  X(dnnl_primitive_desc_query)            \
  X(dnnl_primitive_desc_destroy)          \
  X(dnnl_primitive_create)                \
  X(dnnl_primitive_destroy)               \
  X(dnnl_primitive_execute)

struct Api {
#define POLYOPS_DNNL_POINTER(name) decltype(&::name) name = nullptr;
  POLYOPS_DNNL_FUNCTIONS(POLYOPS_DNNL_POINTER)
#undef POLYOPS_DNNL_POINTER
};

// One load of the library. Never unloaded (dlclose), and its engine is
// never destroyed: thread-local streams may still refer to it.
struct Library {
  uint64_t id = 0;  // distinct per load (a new load may reuse the address)
  Api api;
  dnnl_engine_t engine = nullptr;
  bool avx2 = false;    // effective ISA >= avx2
  bool avx512 = false;  // effective ISA >= avx512_core
  bool bf16 = false;    // effective ISA >= avx512_core_bf16
  Info info;
};

const char* IsaName(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_sse41:
      return "sse41";
    case dnnl_cpu_isa_avx:
      return "avx";
    case dnnl_cpu_isa_avx2:
      return "avx2";
    case dnnl_cpu_isa_avx2_vnni:
      return "avx2_vnni";
    case dnnl_cpu_isa_avx2_vnni_2:
      return "avx2_vnni_2";
    case dnnl_cpu_isa_avx512_core:
      return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_fp16:
      return "avx512_core_fp16";
    case dnnl_cpu_isa_avx512_core_amx:
      return "avx512_core_amx";
    case dnnl_cpu_isa_avx512_core_amx_fp16:
      return "avx512_core_amx_fp16";
    default:
      return "other";
  }
}

const char* StatusName(dnnl_status_t status) {
  switch (status) {
    case dnnl_out_of_memory:
      return "out_of_memory";
    case dnnl_invalid_arguments:
      return "invalid_arguments";
    case dnnl_unimplemented:
      return "unimplemented";
    case dnnl_last_impl_reached:
      return "last_impl_reached";
    case dnnl_runtime_error:
      return "runtime_error";
    case dnnl_not_required:
      return "not_required";
    default:
      return "unknown";
  }
}

void Check(dnnl_status_t status, const char* op, const char* call) {
  if (status == dnnl_success) return;
  throw BackendError(detail::Concat("polyops.", op, ": oneDNN ", call,
                                    " failed with status ", StatusName(status),
                                    " (", static_cast<int>(status), ")"));
}

std::shared_ptr<const Library> Load(const std::string& path) {
  static std::atomic<uint64_t> loads{0};
  auto library = std::make_shared<Library>();
  library->id = ++loads;
  Info& info = library->info;
  info.compiled = true;
  info.library = path.empty() ? "libdnnl.so.3" : path;
  void* handle = dlopen(info.library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    info.reason = detail::Concat("dlopen failed: ",
                                 error != nullptr ? error : "unknown error");
    return library;
  }
  const char* missing = nullptr;
#define POLYOPS_DNNL_RESOLVE(name)                                 \
  if (missing == nullptr) {                                        \
    library->api.name =                                            \
        reinterpret_cast<decltype(&::name)>(dlsym(handle, #name)); \
    if (library->api.name == nullptr) missing = #name;             \
  }
  POLYOPS_DNNL_FUNCTIONS(POLYOPS_DNNL_RESOLVE)
#undef POLYOPS_DNNL_RESOLVE
  if (missing != nullptr) {
    info.reason = detail::Concat(info.library, " does not export ", missing,
                                 ", so it is not oneDNN 3.x");
    return library;
  }
  const dnnl_version_t* version = library->api.dnnl_version();
  info.version =
      detail::Concat(version->major, ".", version->minor, ".", version->patch);
  // The C API is stable within a major version; the structures polyops
  // passes (memory descriptors, post-ops) are handles since 3.0.
  if (version->major != DNNL_VERSION_MAJOR) {
    info.reason = detail::Concat("oneDNN ", info.version,
                                 " is loaded but polyops was built against ",
                                 DNNL_VERSION_MAJOR, ".x");
    return library;
  }
  if (version->cpu_runtime != DNNL_RUNTIME_OMP) {
    // A TBB or sequential oneDNN would not follow torch.set_num_threads.
    info.reason = "the loaded oneDNN is not built on OpenMP";
    return library;
  }
  const dnnl_cpu_isa_t isa = library->api.dnnl_get_effective_cpu_isa();
  info.isa = IsaName(isa);
  info.amx =
      (isa & dnnl_cpu_isa_avx512_core_amx) == dnnl_cpu_isa_avx512_core_amx;
  library->avx512 =
      (isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core;
  library->avx2 = (isa & dnnl_cpu_isa_avx2) == dnnl_cpu_isa_avx2;
  library->bf16 =
      (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
  const dnnl_status_t status =
      library->api.dnnl_engine_create(&library->engine, dnnl_cpu, 0);
  if (status != dnnl_success) {
    info.reason = detail::Concat("dnnl_engine_create failed with status ",
                                 StatusName(status));
    return library;
  }
  info.available = true;
  return library;
}

// A created matmul primitive with its memory descriptors (needed per call
// to wrap the caller's pointers); handle == nullptr records that oneDNN has
// no implementation (or only a reference one) for the key.
struct Primitive {
  std::shared_ptr<const Library> library;
  dnnl_primitive_t handle = nullptr;
  std::array<dnnl_memory_desc_t, 3> mds{};  // src, weights, dst
  std::string impl;

  ~Primitive() {
    const Api& api = library->api;
    if (handle != nullptr) api.dnnl_primitive_destroy(handle);
    for (dnnl_memory_desc_t md : mds) {
      if (md != nullptr) api.dnnl_memory_desc_destroy(md);
    }
  }
};

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

// A CPU stream per thread and library (streams are cheap; one per thread
// keeps concurrent callers from sharing one).
dnnl_stream_t ThreadStream(const Library& library, const char* op) {
  thread_local uint64_t owner = 0;
  thread_local dnnl_stream_t stream = nullptr;
  if (owner != library.id) {
    Check(library.api.dnnl_stream_create(&stream, library.engine,
                                         dnnl_stream_default_flags),
          op, "dnnl_stream_create");
    owner = library.id;
  }
  return stream;
}

// A rows x cols operand of the oneDNN product, batch-major.
struct Matrix {
  int64_t batch;  // 1 when shared by the batch
  int64_t rows, cols;
  int64_t batch_stride, row_stride, col_stride;
};

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

// Owns a oneDNN handle for the scope of a creation.
template <typename Handle, typename Destroy>
struct Scoped {
  Handle handle = nullptr;
  Destroy destroy;
  ~Scoped() {
    if (handle != nullptr) destroy(handle);
  }
};
template <typename Handle, typename Destroy>
Scoped(Handle, Destroy) -> Scoped<Handle, Destroy>;

std::shared_ptr<const Primitive> Create(
    const std::shared_ptr<const Library>& library, const char* op,
    dnnl_data_type_t dt, int ndims, const std::array<Matrix, 3>& operands,
    float alpha, bool use_sum, float beta) {
  const Api& api = library->api;
  auto primitive = std::make_shared<Primitive>();
  primitive->library = library;
  for (size_t i = 0; i < operands.size(); ++i) {
    const Matrix& m = operands[i];
    dnnl_dims_t dims = {m.batch, m.rows, m.cols};
    dnnl_dims_t strides = {m.batch_stride, m.row_stride, m.col_stride};
    const int skip = ndims == 2 ? 1 : 0;
    Check(api.dnnl_memory_desc_create_with_strides(
              &primitive->mds[i], ndims, dims + skip, dt, strides + skip),
          op, "dnnl_memory_desc_create_with_strides");
  }
  Scoped attr{dnnl_primitive_attr_t{nullptr}, api.dnnl_primitive_attr_destroy};
  Scoped post_ops{dnnl_post_ops_t{nullptr}, api.dnnl_post_ops_destroy};
  Check(api.dnnl_primitive_attr_create(&attr.handle), op,
        "dnnl_primitive_attr_create");
  Check(api.dnnl_post_ops_create(&post_ops.handle), op, "dnnl_post_ops_create");
  // alpha * sum first, then + beta * dst (out already holds c): the sums
  // stay float32 until the one rounding to dst's dtype.
  if (alpha != 1.0f) {
    Check(api.dnnl_post_ops_append_eltwise(post_ops.handle, dnnl_eltwise_linear,
                                           alpha, 0.0f),
          op, "dnnl_post_ops_append_eltwise");
  }
  if (use_sum) {
    Check(api.dnnl_post_ops_append_sum(post_ops.handle, beta, 0,
                                       dnnl_data_type_undef),
          op, "dnnl_post_ops_append_sum");
  }
  Check(api.dnnl_primitive_attr_set_post_ops(attr.handle, post_ops.handle), op,
        "dnnl_primitive_attr_set_post_ops");
  Scoped pd{dnnl_primitive_desc_t{nullptr}, api.dnnl_primitive_desc_destroy};
  const dnnl_status_t status = api.dnnl_matmul_primitive_desc_create(
      &pd.handle, library->engine, primitive->mds[0], primitive->mds[1],
      nullptr, primitive->mds[2], attr.handle);
  if (status == dnnl_unimplemented) return primitive;
  Check(status, op, "dnnl_matmul_primitive_desc_create");
  const char* impl = nullptr;
  Check(api.dnnl_primitive_desc_query(pd.handle, dnnl_query_impl_info_str, 0,
                                      &impl),
        op, "dnnl_primitive_desc_query");
  primitive->impl = impl != nullptr ? impl : "";
  // oneDNN's reference matmul is a plain loop nest, far slower than the
  // own kernels or OpenBLAS: not worth selecting.
  if (primitive->impl.rfind("ref", 0) == 0) return primitive;
  Check(api.dnnl_primitive_create(&primitive->handle, pd.handle), op,
        "dnnl_primitive_create");
  return primitive;
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
    primitive = Create(library, op, dt, ndims, operands, alpha, use_sum, beta);
    Insert(library, key, primitive);
  }
  return primitive;
}

void Execute(const Library& library, const char* op,
             std::shared_ptr<const Primitive> primitive, const void* src,
             const void* weights, void* dst) {
  const Api& api = library.api;
  std::array<dnnl_memory_t, 3> memories{};
  struct Release {
    const Api& api;
    std::array<dnnl_memory_t, 3>& memories;
    ~Release() {
      for (dnnl_memory_t memory : memories) {
        if (memory != nullptr) api.dnnl_memory_destroy(memory);
      }
    }
  } release{api, memories};
  // oneDNN takes non-const handles; it only reads src and weights.
  void* data[3] = {const_cast<void*>(src), const_cast<void*>(weights), dst};
  for (size_t i = 0; i < memories.size(); ++i) {
    Check(api.dnnl_memory_create(&memories[i], primitive->mds[i],
                                 library.engine, data[i]),
          op, "dnnl_memory_create");
  }
  const dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, memories[0]},
                                   {DNNL_ARG_WEIGHTS, memories[1]},
                                   {DNNL_ARG_DST, memories[2]}};
  dnnl_stream_t stream = ThreadStream(library, op);
  Check(api.dnnl_primitive_execute(primitive->handle, stream, 3, args), op,
        "dnnl_primitive_execute");
  Check(api.dnnl_stream_wait(stream), op, "dnnl_stream_wait");
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
