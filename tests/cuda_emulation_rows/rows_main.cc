// Runs one call of a row-wise CUDA slot under the host emulation
// (emulated_cuda.h) on tensors described by a manifest that
// tests/test_cuda_rows_emulated.py writes:
//   op <name> <slot>
//   storage <id> <bytes> <path>        raw bytes, written back to <path>.out
//   tensor <storage> <byte offset> <dtype enum> <ndim> <shape...> <strides...>
//   none | double <v> | int <v> | bool <0|1>   (the op's arguments in order)
// Exit status 0, or 3 with polyops' error message on stderr.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "emulated_cuda.h"
// The slot headers, rewritten (launches) by the test into its build folder.
#include "core/operator.h"
#include "cuda/add_rms_norm/vector.cuh"
#include "cuda/apply_rotary_pos_emb/token.cuh"
#include "cuda/causal_softmax/vector.cuh"
#include "cuda/reshape_and_cache/vector.cuh"
#include "cuda/rms_norm/vector.cuh"
#include "cuda/rotary_embedding/token.cuh"
#include "cuda/silu_and_mul/vector.cuh"
#include "cuda/silu_and_mul/vllm.cuh"
#include "cuda/swiglu/vector.cuh"

namespace {

using polyops::Device;
using polyops::Tensor;
using Arg = std::variant<std::monostate, Tensor, double, int64_t, bool>;

const Tensor& T(const Arg& arg) { return std::get<Tensor>(arg); }
std::optional<Tensor> OptT(const Arg& arg) {
  if (std::holds_alternative<std::monostate>(arg)) return std::nullopt;
  return std::get<Tensor>(arg);
}
double D(const Arg& arg) { return std::get<double>(arg); }
int64_t I(const Arg& arg) { return std::get<int64_t>(arg); }
bool B(const Arg& arg) { return std::get<bool>(arg); }
std::optional<int64_t> OptI(const Arg& arg) {
  if (std::holds_alternative<std::monostate>(arg)) return std::nullopt;
  return std::get<int64_t>(arg);
}

template <typename Op, typename... Args>
void Run(int slot, const Args&... args) {
  auto impl =
      polyops::MakeImplementation<Op, Device::Type::kCuda>(slot, args...);
  if (!impl) throw std::runtime_error("no such CUDA slot");
  polyops::Handle handle;
  handle.device = Device{Device::Type::kCuda, 0};
  (*impl)(handle, args...);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  std::ifstream manifest(argv[1]);
  std::string op;
  int slot = 0;
  std::map<int, std::vector<uint64_t>> storages;  // 8-byte aligned buffers
  std::map<int, std::string> paths;
  std::map<int, size_t> sizes;
  std::vector<Arg> args;
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
      // 16 spare words: the emulated pointer alignment is what torch's was
      // modulo 64 (the test passes 64-byte aligned storages only).
      std::vector<uint64_t> buffer((bytes + 7) / 8 + 16);
      char* base = reinterpret_cast<char*>(buffer.data());
      char* aligned =
          base + ((64 - reinterpret_cast<uintptr_t>(base) % 64) % 64);
      std::ifstream blob(path, std::ios::binary);
      blob.read(aligned, static_cast<std::streamsize>(bytes));
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
      char* base = reinterpret_cast<char*>(storages.at(id).data());
      base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
      args.push_back(Tensor::FromParts(base + offset, ndim, shape, strides,
                                       static_cast<polyops::DataType>(dtype),
                                       Device{Device::Type::kCuda, 0}));
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
    }
  }
  using namespace polyops;  // NOLINT: the op classes
  try {
    const auto& a = args;
    if (op == "rms_norm") {
      Run<RmsNorm>(slot, T(a[0]), T(a[1]), D(a[2]), OptT(a[3]));
    } else if (op == "add_rms_norm") {
      Run<AddRmsNorm>(slot, T(a[0]), T(a[1]), T(a[2]), D(a[3]), OptT(a[4]),
                      OptT(a[5]));
    } else if (op == "swiglu") {
      Run<Swiglu>(slot, T(a[0]), T(a[1]), OptT(a[2]));
    } else if (op == "silu_and_mul") {
      Run<SiluAndMul>(slot, T(a[0]), OptT(a[1]));
    } else if (op == "causal_softmax") {
      Run<CausalSoftmax>(slot, T(a[0]), OptT(a[1]));
    } else if (op == "rotary_embedding") {
      Run<RotaryEmbedding>(slot, T(a[0]), T(a[1]), OptT(a[2]), I(a[3]), T(a[4]),
                           B(a[5]), OptI(a[6]), OptT(a[7]), OptT(a[8]));
    } else if (op == "apply_rotary_pos_emb") {
      Run<ApplyRotaryPosEmb>(slot, T(a[0]), OptT(a[1]), T(a[2]), T(a[3]),
                             B(a[4]), OptT(a[5]), OptT(a[6]));
    } else if (op == "reshape_and_cache") {
      Run<ReshapeAndCache>(slot, T(a[0]), T(a[1]), T(a[2]), T(a[3]), T(a[4]));
    } else {
      std::cerr << "unknown op " << op << "\n";
      return 2;
    }
  } catch (const std::exception& error) {
    std::cerr << error.what() << "\n";
    return 3;
  }
  for (auto& [id, buffer] : storages) {
    char* base = reinterpret_cast<char*>(buffer.data());
    base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
    std::ofstream out(paths[id] + ".out", std::ios::binary);
    out.write(base, static_cast<std::streamsize>(sizes[id]));
  }
  return 0;
}
