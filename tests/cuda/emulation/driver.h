// The emulated CUDA drivers' common part (rows_main.cc, attention_main.cc,
// elementwise_main.cc): reads the manifest that tests/cuda/emulation/
// harness.py writes, runs one call of a CUDA slot through the op's
// dispatch, and writes the storages back.
//   op <name> <slot>
//   storage <id> <bytes> <path>        raw bytes, written back to <path>.out
//   tensor <storage> <byte offset> <dtype enum> <ndim> <shape...> <strides...>
//          [cpu]                       (default: a CUDA tensor)
//   tensors <n>                        the next n tensor lines are one list
//   none | double <v> | int <v> | bool <0|1> | dtype <enum>
// (the op's arguments in order). Exit status 0, or 3 with polyops' error
// message on stderr.
#ifndef POLYOPS_TESTS_CUDA_EMULATION_DRIVER_H_
#define POLYOPS_TESTS_CUDA_EMULATION_DRIVER_H_

#include <cstdint>
#include <exception>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "core/operator.h"
#include "core/tensor.h"

namespace emulation {

using polyops::Device;
using polyops::Tensor;
using Arg = std::variant<std::monostate, Tensor, double, int64_t, bool,
                         polyops::DataType, std::vector<Tensor>>;
using Args = std::vector<Arg>;

inline const Tensor& T(const Arg& arg) { return std::get<Tensor>(arg); }
inline std::optional<Tensor> OptT(const Arg& arg) {
  if (std::holds_alternative<std::monostate>(arg)) return std::nullopt;
  return std::get<Tensor>(arg);
}
inline const std::vector<Tensor>& TList(const Arg& arg) {
  return std::get<std::vector<Tensor>>(arg);
}
inline double D(const Arg& arg) { return std::get<double>(arg); }
inline std::optional<double> OptD(const Arg& arg) {
  if (std::holds_alternative<std::monostate>(arg)) return std::nullopt;
  return std::get<double>(arg);
}
inline int64_t I(const Arg& arg) { return std::get<int64_t>(arg); }
inline std::optional<int64_t> OptI(const Arg& arg) {
  if (std::holds_alternative<std::monostate>(arg)) return std::nullopt;
  return std::get<int64_t>(arg);
}
inline bool B(const Arg& arg) { return std::get<bool>(arg); }
inline polyops::DataType Dtype(const Arg& arg) {
  return std::get<polyops::DataType>(arg);
}

// One call of `Op`'s CUDA slot `slot`: constructor (cache miss), then call.
template <typename Op, typename... Params>
void Run(int slot, const Params&... args) {
  auto impl =
      polyops::MakeImplementation<Op, Device::Type::kCuda>(slot, args...);
  if (!impl) throw std::runtime_error("no such CUDA slot");
  polyops::Handle handle;
  handle.device = Device{Device::Type::kCuda, 0};
  (*impl)(handle, typename Op::Args{args...});
}

// 16 spare words per storage: the emulated pointer alignment is what
// torch's was modulo 64 (the harness passes 64-byte aligned storages only).
inline char* Aligned(std::vector<uint64_t>& buffer) {
  char* base = reinterpret_cast<char*>(buffer.data());
  return base + (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
}

// Reads the manifest at argv[1], calls dispatch(op, slot, args) (false:
// unknown op), writes the storages back.
template <typename Dispatch>
int DriverMain(int argc, char** argv, Dispatch dispatch) {
  if (argc != 2) return 2;
  std::ifstream manifest(argv[1]);
  std::string op;
  int slot = 0;
  std::map<int, std::vector<uint64_t>> storages;  // 8-byte aligned buffers
  std::map<int, std::string> paths;
  std::map<int, size_t> sizes;
  Args args;
  int list_left = 0;  // tensor lines still owed to a `tensors` list
  std::string line;
  while (std::getline(manifest, line)) {
    std::istringstream in(line);
    std::string kind;
    in >> kind;
    if (kind == "op") {
      in >> op >> slot;
    } else if (kind == "storage") {
      int id;
      size_t bytes;
      std::string path;
      in >> id >> bytes >> path;
      std::vector<uint64_t> buffer((bytes + 7) / 8 + 16);
      std::ifstream blob(path, std::ios::binary);
      blob.read(Aligned(buffer), static_cast<std::streamsize>(bytes));
      storages[id] = std::move(buffer);
      paths[id] = path;
      sizes[id] = bytes;
    } else if (kind == "tensor") {
      int id, dtype, ndim;
      size_t offset;
      in >> id >> offset >> dtype >> ndim;
      int64_t shape[polyops::kMaxDims], strides[polyops::kMaxDims];
      for (int d = 0; d < ndim; ++d) in >> shape[d];
      for (int d = 0; d < ndim; ++d) in >> strides[d];
      std::string where;
      in >> where;
      const Device device = where == "cpu" ? Device{Device::Type::kCpu, 0}
                                           : Device{Device::Type::kCuda, 0};
      Tensor tensor = Tensor::FromParts(
          Aligned(storages.at(id)) + offset, ndim, shape, strides,
          static_cast<polyops::DataType>(dtype), device);
      if (list_left > 0) {
        std::get<std::vector<Tensor>>(args.back()).push_back(tensor);
        --list_left;
      } else {
        args.push_back(tensor);
      }
    } else if (kind == "tensors") {
      in >> list_left;
      args.push_back(std::vector<Tensor>{});
    } else if (kind == "none") {
      args.push_back(std::monostate{});
    } else if (kind == "double") {
      double value;
      in >> value;
      args.push_back(value);
    } else if (kind == "int") {
      int64_t value;
      in >> value;
      args.push_back(value);
    } else if (kind == "bool") {
      int value;
      in >> value;
      args.push_back(value != 0);
    } else if (kind == "dtype") {
      int value;
      in >> value;
      args.push_back(static_cast<polyops::DataType>(value));
    }
  }
  try {
    if (!dispatch(op, slot, args)) {
      std::cerr << "unknown op " << op << "\n";
      return 2;
    }
  } catch (const std::exception& error) {
    std::cerr << error.what() << "\n";
    return 3;
  }
  for (auto& [id, buffer] : storages) {
    std::ofstream out(paths[id] + ".out", std::ios::binary);
    out.write(Aligned(buffer), static_cast<std::streamsize>(sizes[id]));
  }
  return 0;
}

}  // namespace emulation

#endif  // POLYOPS_TESTS_CUDA_EMULATION_DRIVER_H_
