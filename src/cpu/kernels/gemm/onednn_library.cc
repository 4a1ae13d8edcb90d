// Loading oneDNN at run time (onednn_library.h): dlopen, dlsym of every
// function, the version, threading runtime and ISA checks, the engine.
#ifdef POLYOPS_WITH_ONEDNN

#include "cpu/kernels/gemm/onednn_library.h"

#include <dlfcn.h>
#include <oneapi/dnnl/dnnl.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "core/error.h"

namespace polyops::cpu::onednn {
namespace {

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

}  // namespace

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

}  // namespace polyops::cpu::onednn

#endif  // POLYOPS_WITH_ONEDNN
