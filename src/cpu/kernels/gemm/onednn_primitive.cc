// Creating and running oneDNN matmul primitives (onednn_primitive.h).
#ifdef POLYOPS_WITH_ONEDNN

#include "cpu/kernels/gemm/onednn_primitive.h"

#include <oneapi/dnnl/dnnl.h>

#include <array>
#include <cstdint>
#include <memory>

#include "cpu/kernels/gemm/onednn_library.h"

namespace polyops::cpu::onednn {
namespace {

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

}  // namespace

std::shared_ptr<const Primitive> CreatePrimitive(
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

void ExecutePrimitive(const Library& library, const char* op,
                      const Primitive& primitive, const void* src,
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
    Check(api.dnnl_memory_create(&memories[i], primitive.mds[i], library.engine,
                                 data[i]),
          op, "dnnl_memory_create");
  }
  const dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, memories[0]},
                                   {DNNL_ARG_WEIGHTS, memories[1]},
                                   {DNNL_ARG_DST, memories[2]}};
  dnnl_stream_t stream = ThreadStream(library, op);
  Check(api.dnnl_primitive_execute(primitive.handle, stream, 3, args), op,
        "dnnl_primitive_execute");
  Check(api.dnnl_stream_wait(stream), op, "dnnl_stream_wait");
}

}  // namespace polyops::cpu::onednn

#endif  // POLYOPS_WITH_ONEDNN
