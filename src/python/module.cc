// The polyops._C extension: the generated op functions plus the framework
// functions that python/polyops wraps. No torch header and no torch library:
// tensors are read through DLPack (tensor_exchange.h), and the torch.library
// side lives in polyops._torch_ops (torch_module.cc).
#include <pybind11/stl.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cpu/kernels/gemm/blas_gemm.h"
#include "cpu/kernels/gemm/gemm_autotune.h"
#include "cpu/kernels/gemm/gemm_kernels.h"
#include "cpu/kernels/gemm/onednn.h"
#include "cpu/runtime/isa.h"
#include "python/meta_check.h"
#include "python/tensor_exchange.h"
#ifdef POLYOPS_WITH_CUDA
#include "cuda/runtime/workspace.h"
#endif
#ifdef POLYOPS_WITH_ASCEND
#include "ascend/runtime/launch.h"
#endif

namespace polyops::python {
namespace {

// The Levenshtein distance between a and b (one row of the table).
size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1,
                         diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

OpState& LookUpOp(const std::string& op, const char* caller) {
  OpState* state = FindOpState(op);
  if (!state) {
    std::string known;
    std::string closest;
    size_t best = 3;  // a suggestion at most 2 edits away (a typo)
    for (OpState* each : AllOpStates()) {
      known += known.empty() ? "" : ", ";
      known += each->name();
      const size_t distance = EditDistance(op, each->name());
      if (distance < best) {
        best = distance;
        closest = each->name();
      }
    }
    const std::string hint =
        closest.empty() ? ""
                        : detail::Concat(" (did you mean '", closest, "'?)");
    throw InvalidArgument(detail::Concat("polyops.", caller, ": unknown op '",
                                         op, "'", hint,
                                         "; known ops: ", known));
  }
  return *state;
}

Device::Type LookUpDevice(const std::string& device, const char* caller) {
  const size_t colon = device.find(':');
  const std::string type = device.substr(0, colon);
  const std::string index =
      colon == std::string::npos ? "0" : device.substr(colon + 1);
  const bool index_ok =
      !index.empty() && index.size() <= 9 &&
      index.find_first_not_of("0123456789") == std::string::npos;
  if (const DeviceInfo* info = FindDeviceNamed(type); info && index_ok) {
    return info->type;
  }
  throw InvalidArgument(detail::Concat(
      "polyops.", caller, ": unknown device '", device, "'; expected ",
      DeviceNames(), ", optionally with an index such as 'cuda:1'"));
}

py::dict InfoDict(const CacheInfo& info) {
  py::dict result;
  result["hits"] = info.hits;
  result["misses"] = info.misses;
  result["evictions"] = info.evictions;
  result["size"] = info.size;
  result["capacity"] = info.capacity;
  return result;
}

}  // namespace

void SetCudaWorkspaceAllocator(const void* allocator) {
#ifdef POLYOPS_WITH_CUDA
  cuda::SetWorkspaceAllocator(
      *static_cast<const cuda::WorkspaceAllocator*>(allocator));
#else
  (void)allocator;
#endif
}

PYBIND11_MODULE(_C, module) {
  RegisterErrorTranslator();

  InitTensorExchange();
  BindOps(module);

  module.def(
      "_implementations",
      [](const std::string& op, const std::string& device) {
        const SlotTable& table =
            LookUpOp(op, "implementations")
                .Slots(LookUpDevice(device, "implementations"));
        py::dict slots;
        for (int i = 0; i < table.count; ++i) {
          slots[py::int_(table.slots[i].index)] = table.slots[i].name;
        }
        return slots;
      },
      py::arg("op"), py::arg("device"));
  module.def(
      "_default_implementation",
      [](const std::string& op, const std::string& device) -> py::object {
        OpState& state = LookUpOp(op, "default_implementation");
        const Device::Type type =
            LookUpDevice(device, "default_implementation");
        const int chosen = state.Override(type);
        const int slot = chosen >= 0 ? chosen : state.Slots(type).default_index;
        if (slot < 0) return py::none();
        return py::int_(slot);
      },
      py::arg("op"), py::arg("device"));
  module.def(
      "_set_default_implementation",
      [](const std::string& op, std::optional<int64_t> index,
         const std::string& device) {
        OpState& state = LookUpOp(op, "set_default_implementation");
        const Device::Type type =
            LookUpDevice(device, "set_default_implementation");
        if (!index) {
          state.SetOverride(type, -1);
          return;
        }
        POLYOPS_CHECK(*index >= 0 && *index < kMaxImplementations &&
                          state.Slots(type).Has(static_cast<int>(*index)),
                      "polyops.set_default_implementation: ", op,
                      " has no implementation_index=", *index, " on device '",
                      DeviceTypeName(type),
                      "'; available: ", state.DescribeSlots(type));
        state.SetOverride(type, static_cast<int>(*index));
      },
      py::arg("op"), py::arg("index"), py::arg("device"));
  module.def(
      "_cache_info",
      [](std::optional<std::string> op) {
        if (op) return InfoDict(LookUpOp(*op, "cache_info").cache().Info());
        CacheInfo total;
        total.capacity = CacheCapacity();
        for (OpState* state : AllOpStates()) {
          const CacheInfo info = state->cache().Info();
          total.hits += info.hits;
          total.misses += info.misses;
          total.evictions += info.evictions;
          total.size += info.size;
        }
        return InfoDict(total);
      },
      py::arg("op") = py::none());
  // Testing hook: makes the constructors of `slots` of `op` on `device`
  // raise NotImplementedError (an empty list restores them), to exercise the
  // automatic fallback (Operator<Key>::Get). Affects cache misses only:
  // clear the cache around its use.
  module.def(
      "_refuse_implementations",
      [](const std::string& op, const std::string& device,
         const std::vector<int>& slots) {
        OpState& state = LookUpOp(op, "_refuse_implementations");
        const Device::Type type =
            LookUpDevice(device, "_refuse_implementations");
        uint32_t mask = 0;
        for (int slot : slots) {
          POLYOPS_CHECK(slot >= 0 && slot < kMaxImplementations,
                        "polyops._refuse_implementations: slot must be in [0, ",
                        kMaxImplementations, "), got ", slot);
          mask |= 1u << slot;
        }
        state.SetRefusedForTesting(type, mask);
      },
      py::arg("op"), py::arg("device"), py::arg("slots"));
  module.def("_set_cache_capacity", &SetCacheCapacity, py::arg("n"));
  // For tests: the negative-bit / autograd reads through torch's Python-level
  // functions, as without polyops._torch_ops (tensor_exchange.h).
  module.def("_use_portable_tensor_flags", &UsePortableTensorFlags);
  // The fakes' validation (python/polyops/_torch_library.py).
  module.def("_check_meta", &CheckMeta, py::arg("op"), py::arg("overload"),
             py::arg("values"));
  py::list overloads;
  for (const TorchOverload& overload : TorchOverloads()) {
    overloads.append(py::make_tuple(overload.op, overload.overload,
                                    overload.schema,
                                    py::tuple(py::cast(overload.returns))));
  }
  module.attr("_torch_overloads") = py::tuple(overloads);
  module.def("_clear_cache", [] {
    for (OpState* state : AllOpStates()) state->cache().Clear();
    cpu::autotune::Clear();
#ifdef POLYOPS_WITH_ASCEND
    ascend::ReleaseStreamPools();  // the npu per-stream workspace pools
#endif
  });
  // The measured choice of the CPU products' path
  // (cpu/kernels/gemm/gemm_autotune.h; python/polyops/_autotune.py is the
  // public face).
  module.def("_autotune_enabled", &cpu::autotune::Enabled);
  module.def("_autotune_enable", &cpu::autotune::Enable, py::arg("on"));
  module.def("_autotune_entries", [] {
    py::list result;
    for (const cpu::autotune::Entry& entry : cpu::autotune::Entries()) {
      py::dict item;
      item["op"] = entry.op;
      item["key"] = entry.key;
      item["dtype"] = DataTypeName(static_cast<DataType>(entry.key.at(0)));
      item["pick"] = cpu::autotune::PathName(entry.pick);
      py::dict timings;
      for (const auto& [path, us] : entry.timings_us) {
        timings[cpu::autotune::PathName(path)] = us;
      }
      item["timings_us"] = timings;
      result.append(item);
    }
    return result;
  });
  module.def(
      "_autotune_record",
      [](const std::string& op, const std::vector<int64_t>& key,
         const std::string& pick) {
        const bool float_dtype =
            !key.empty() &&
            (key[0] == static_cast<int64_t>(DataType::kFloat16) ||
             key[0] == static_cast<int64_t>(DataType::kBFloat16) ||
             key[0] == static_cast<int64_t>(DataType::kFloat32));
        if (key.size() != cpu::autotune::kKeySize || !float_dtype) {
          throw InvalidArgument(detail::Concat(
              "polyops.load_autotune: key must be ", cpu::autotune::kKeySize,
              " integers starting with a float16, bfloat16 or float32 code"));
        }
        for (auto path :
             {cpu::autotune::Path::kOneDnn, cpu::autotune::Path::kOwn,
              cpu::autotune::Path::kOpenBlas}) {
          if (pick == cpu::autotune::PathName(path)) {
            cpu::autotune::Record({op, key, path, {}});
            return;
          }
        }
        throw InvalidArgument(detail::Concat(
            "polyops.load_autotune: pick must be onednn, own or openblas, "
            "got '",
            pick, "'"));
      },
      py::arg("op"), py::arg("key"), py::arg("pick"));
  // Which CPU matmul/gemm/linear path this thread's last call took
  // (benchmarks/gemm.py prints it).
  module.def("_cpu_gemm_path", [] { return std::string(cpu::LastGemmPath()); });
  // oneDNN, the CPU products' library path (docs/backends/cpu_gemm.md): whether
  // it is compiled in and loaded, its version, effective ISA, this thread's
  // last primitive and why it declined this thread's last product, if it did.
  // Loads the library on first use.
  module.def("_onednn_info", [] {
    const cpu::onednn::Info info = cpu::onednn::GetInfo();
    py::dict result;
    result["compiled"] = info.compiled;
    result["available"] = info.available;
    result["amx"] = info.amx;
    result["library"] = info.library;
    result["version"] = info.version;
    result["isa"] = info.isa;
    result["reason"] = info.reason;
    result["last_impl"] = info.last_impl;
    result["declined"] = info.declined;
    return result;
  });
  // The libdnnl.so.3 to load at the next use ("" = the loader's search
  // path); the package passes the onednn-cpu-gomp wheel's at import.
  module.def("_onednn_set_library", &cpu::onednn::SetLibraryPath,
             py::arg("path"));
  // The ISA variant the CPU row and attention kernels run on (the CPU's
  // flags capped by POLYOPS_CPU_ISA): "avx512", "avx2" or "baseline".
  // ValueError for a bad POLYOPS_CPU_ISA, on any CPU (`import polyops`
  // calls it).
  module.def("_cpu_isa", [] {
    cpu::CpuIsaLimit();
    return std::string(cpu::PickIsa("baseline", "avx2", "avx512"));
  });
  // Whether the CPU products' bfloat16 routes see AVX512-BF16 (the own
  // bfloat16 kernels; oneDNN past the decode rows), POLYOPS_CPU_ISA applied.
  module.def("_cpu_gemm_bf16", &cpu::GemmHasAvx512Bf16);

  py::list devices;
  for (const DeviceInfo& info : kDevices) devices.append(info.name);
  module.attr("_devices") = py::tuple(devices);  // the registry, core/device.h
#ifdef POLYOPS_WITH_CUDA
  // For tests: a Workspace of nbytes on cuda:<device> for `stream` (a raw
  // cudaStream_t, 0 = default), given back at once; returns its address.
  module.def(
      "_cuda_workspace_probe",
      [](int device, size_t nbytes, uintptr_t stream) {
        Handle handle;
        handle.device = Device{Device::Type::kCuda, device};
        handle.stream = reinterpret_cast<void*>(stream);
        return cuda::ProbeWorkspace(handle, nbytes);
      },
      py::arg("device"), py::arg("nbytes"), py::arg("stream") = 0);
#endif
  // The torch polyops._torch_ops was built for (python/polyops/__init__.py
  // loads it only under that torch's minor version).
  module.attr("_torch_ops_version") = POLYOPS_TORCH_VERSION;
}

}  // namespace polyops::python
