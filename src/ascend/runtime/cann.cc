#include "ascend/runtime/cann.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/error.h"

namespace polyops::ascend {
namespace {

// POLYOPS_CANN_LIB_DIR: the directory use_cann_double() (or the user)
// names; nullptr when unset or empty.
const char* NamedDirectory() {
  const char* dir = std::getenv("POLYOPS_CANN_LIB_DIR");
  return dir != nullptr && *dir != '\0' ? dir : nullptr;
}

// Where CANN is looked for, in order: the directory NamedDirectory()
// names, the toolkit that set_env.sh describes, the loader path.
std::vector<std::string> SearchDirectories() {
  std::vector<std::string> directories;
  if (const char* dir = NamedDirectory()) directories.emplace_back(dir);
  for (const char* variable : {"ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"}) {
    if (const char* home = std::getenv(variable)) {
      directories.push_back(std::string(home) + "/lib64");
    }
  }
  directories.emplace_back("");  // the dynamic loader's own search path
  return directories;
}

std::string Describe(const std::vector<std::string>& directories) {
  std::string text;
  for (const std::string& dir : directories) {
    text += text.empty() ? "" : ", ";
    text += dir.empty() ? "the loader path" : dir;
  }
  return text;
}

void* Open(const std::string& dir, const char* name) {
  const std::string path = dir.empty() ? name : dir + "/" + name;
  return dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
}

struct Libraries {
  std::mutex mutex;
  bool loaded = false;
  Runtime runtime{};
  std::vector<void*> op_libraries;  // libopapi.so or the per-repo ones
  std::string op_library_names;
  std::unordered_map<std::string, void*> symbols;
};

Libraries& State() {
  static Libraries* libraries = new Libraries;  // used until exit
  return *libraries;
}

std::atomic<bool> g_loaded{false};

template <typename Fn>
void Resolve(void* library, const char* library_name, const char* symbol,
             Fn& target) {
  void* address = dlsym(library, symbol);
  if (!address) {
    throw BackendError(detail::Concat(
        "polyops: the Ascend backend needs ", symbol, ", which ", library_name,
        " does not export; every CANN release since 8.0 has it, so this "
        "library is not a usable CANN runtime"));
  }
  target = reinterpret_cast<Fn>(address);
}

void Load(Libraries& state) {
  const std::vector<std::string> directories = SearchDirectories();
  void* runtime = nullptr;
  std::string found_in;
  for (const std::string& dir : directories) {
    // The open runtime also ships as libacl_rt.so.
    for (const char* name : {"libascendcl.so", "libacl_rt.so"}) {
      if ((runtime = Open(dir, name))) break;
    }
    if (runtime) {
      found_in = dir;
      break;
    }
    // A named directory without a runtime is a mistake to report, not a
    // reason to load another CANN from further down the list.
    if (const char* named = NamedDirectory(); named && dir == named) {
      const char* why = dlerror();
      throw InvalidArgument(detail::Concat(
          "environment variable POLYOPS_CANN_LIB_DIR must name a directory "
          "holding CANN's libascendcl.so (or libacl_rt.so), got '",
          named, "': ", why ? why : "not loadable",
          " (unset it to search ASCEND_HOME_PATH and the loader path)"));
    }
  }
  if (!runtime) {
    throw BackendError(detail::Concat(
        "polyops: the Ascend backend could not load libascendcl.so (or "
        "libacl_rt.so); searched ",
        Describe(directories),
        ". Install the CANN toolkit and source its set_env.sh (which sets "
        "ASCEND_HOME_PATH), or call polyops.testing.use_cann_double() to run "
        "on the CANN test double"));
  }
  void* nnopbase = Open(found_in, "libnnopbase.so");
  if (!nnopbase) nnopbase = Open("", "libnnopbase.so");
  if (!nnopbase) {
    throw BackendError(detail::Concat(
        "polyops: the Ascend backend found the CANN runtime in ",
        found_in.empty() ? "the loader path" : found_in,
        " but could not load libnnopbase.so there or on the loader path"));
  }
  std::vector<void*> ops;
  std::string op_names;
  if (void* all = Open(found_in, "libopapi.so")) {
    ops.push_back(all);
    op_names = "libopapi.so";
  } else {
    // Newer toolkits split the operators per repository and say the
    // all-in-one library must not be mixed with them.
    for (const char* name :
         {"libopapi_math.so", "libopapi_nn.so", "libopapi_transformer.so"}) {
      void* library = Open(found_in, name);
      if (!library && !found_in.empty()) library = Open("", name);
      if (library) {
        ops.push_back(library);
        op_names += op_names.empty() ? "" : ", ";
        op_names += name;
      }
    }
  }
  if (ops.empty()) {
    throw BackendError(detail::Concat(
        "polyops: the Ascend backend found the CANN runtime but no operator "
        "library (libopapi.so, or libopapi_math.so / libopapi_nn.so / "
        "libopapi_transformer.so) in ",
        found_in.empty() ? "the loader path" : found_in));
  }

  Runtime rt{};
  Resolve(runtime, "libascendcl.so", "aclrtMalloc", rt.rt_malloc);
  Resolve(runtime, "libascendcl.so", "aclrtFree", rt.rt_free);
  Resolve(runtime, "libascendcl.so", "aclrtSynchronizeStream",
          rt.rt_synchronize_stream);
  Resolve(runtime, "libascendcl.so", "aclrtSynchronizeDevice",
          rt.rt_synchronize_device);
  Resolve(runtime, "libascendcl.so", "aclrtGetDevice", rt.rt_get_device);
  Resolve(runtime, "libascendcl.so", "aclrtSetDevice", rt.rt_set_device);
  Resolve(runtime, "libascendcl.so", "aclrtMemcpy", rt.rt_memcpy);
  Resolve(runtime, "libascendcl.so", "aclGetRecentErrMsg",
          rt.get_recent_err_msg);
  Resolve(nnopbase, "libnnopbase.so", "aclCreateTensor", rt.create_tensor);
  Resolve(nnopbase, "libnnopbase.so", "aclDestroyTensor", rt.destroy_tensor);
  Resolve(nnopbase, "libnnopbase.so", "aclCreateScalar", rt.create_scalar);
  Resolve(nnopbase, "libnnopbase.so", "aclDestroyScalar", rt.destroy_scalar);
  Resolve(nnopbase, "libnnopbase.so", "aclCreateTensorList",
          rt.create_tensor_list);
  Resolve(nnopbase, "libnnopbase.so", "aclDestroyTensorList",
          rt.destroy_tensor_list);
  Resolve(nnopbase, "libnnopbase.so", "aclCreateIntArray", rt.create_int_array);
  Resolve(nnopbase, "libnnopbase.so", "aclDestroyIntArray",
          rt.destroy_int_array);
  Resolve(nnopbase, "libnnopbase.so", "aclSetAclOpExecutorRepeatable",
          rt.set_executor_repeatable);
  Resolve(nnopbase, "libnnopbase.so", "aclDestroyAclOpExecutor",
          rt.destroy_executor);
  Resolve(nnopbase, "libnnopbase.so", "aclSetInputTensorAddr",
          rt.set_input_tensor_addr);
  Resolve(nnopbase, "libnnopbase.so", "aclSetOutputTensorAddr",
          rt.set_output_tensor_addr);
  Resolve(nnopbase, "libnnopbase.so", "aclSetDynamicInputTensorAddr",
          rt.set_dynamic_input_tensor_addr);
  // aclsysGetVersionStr(pkgName, versionStr): the package name and the
  // 128-byte buffer (ACL_PKG_VERSION_MAX_SIZE) are read from CANN's docs,
  // never checked on a real toolkit (docs/backends/ascend.md).
  using VersionFn = AclError (*)(char*, char*);
  if (auto version =
          reinterpret_cast<VersionFn>(dlsym(runtime, "aclsysGetVersionStr"))) {
    char package[] = "runtime";
    char text[128] = {};
    if (version(package, text) == 0) rt.version = text;
  }
  rt.directory = found_in.empty() ? "the loader path" : found_in;
  state.runtime = rt;
  state.op_libraries = std::move(ops);
  state.op_library_names = std::move(op_names);
  state.loaded = true;
  g_loaded.store(true, std::memory_order_release);
}

}  // namespace

const Runtime& GetRuntime() {
  Libraries& state = State();
  if (g_loaded.load(std::memory_order_acquire)) return state.runtime;
  std::lock_guard<std::mutex> lock(state.mutex);
  if (!state.loaded) Load(state);
  return state.runtime;
}

bool RuntimeLoaded() { return g_loaded.load(std::memory_order_acquire); }

void* OpSymbol(const char* name, const char* since) {
  const Runtime& runtime = GetRuntime();
  Libraries& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);
  auto found = state.symbols.find(name);
  if (found != state.symbols.end()) return found->second;
  for (void* library : state.op_libraries) {
    if (void* address = dlsym(library, name)) {
      state.symbols.emplace(name, address);
      return address;
    }
  }
  throw BackendError(detail::Concat(
      "polyops: ", name, " is not in ", state.op_library_names, " (",
      runtime.directory, ", CANN ",
      runtime.version.empty() ? "of unknown version" : runtime.version,
      "); it exists from CANN ", since, " on"));
}

void CheckStatus(int status, const char* op, const char* call) {
  if (status == 0) return;
  const char* message = GetRuntime().get_recent_err_msg();
  throw BackendError(detail::Concat("polyops.", op, ": ", call,
                                    " failed with status ", status, ": ",
                                    message ? message : "(no message)"));
}

}  // namespace polyops::ascend
