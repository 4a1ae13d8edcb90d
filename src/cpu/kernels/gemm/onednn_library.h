// The loaded oneDNN library behind onednn.h: the C API functions polyops
// calls, resolved with dlsym, and what its effective ISA allows. Included
// only where POLYOPS_WITH_ONEDNN is defined (it needs oneDNN's headers).
#ifndef POLYOPS_CPU_KERNELS_GEMM_ONEDNN_LIBRARY_H_
#define POLYOPS_CPU_KERNELS_GEMM_ONEDNN_LIBRARY_H_

#include <oneapi/dnnl/dnnl.h>

#include <cstdint>
#include <memory>
#include <string>

#include "cpu/kernels/gemm/onednn.h"

namespace polyops::cpu::onednn {

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

// Throws BackendError naming `op` and the oneDNN `call` unless `status` is
// dnnl_success.
void Check(dnnl_status_t status, const char* op, const char* call);

// Opens `path` ("" = libdnnl.so.3 from the loader's search path) and
// resolves the API. Never throws: a library that cannot serve has
// info.available false and info.reason set.
std::shared_ptr<const Library> Load(const std::string& path);

}  // namespace polyops::cpu::onednn

#endif  // POLYOPS_CPU_KERNELS_GEMM_ONEDNN_LIBRARY_H_
