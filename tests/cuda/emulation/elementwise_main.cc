// Runs one call of the CUDA add, mul, cast or cat slot under the host
// emulation (emulated_cuda.h) on the tensors of a manifest (driver.h) that
// tests/cuda/test_cuda_elementwise_emulated.py writes.
#include <string>
#include <variant>

#include "emulated_cuda.h"
// The slot headers, rewritten by the test into its build folder.
#include "cuda/add/vector.cuh"
#include "cuda/cast/loop.cuh"
#include "cuda/cat/copy.cuh"
#include "cuda/mul/vector.cuh"
#include "driver.h"

int main(int argc, char** argv) {
  using namespace emulation;  // NOLINT: the argument accessors
  using namespace polyops;    // NOLINT: the op classes
  return DriverMain(
      argc, argv, [](const std::string& op, int slot, const Args& a) {
        if (op == "add") {
          // alpha: an int for integer tensors, as torch takes it.
          const double alpha = std::holds_alternative<int64_t>(a[2])
                                   ? static_cast<double>(I(a[2]))
                                   : D(a[2]);
          Run<Add>(slot, T(a[0]), T(a[1]), alpha, OptT(a[3]));
        } else if (op == "mul") {
          Run<Mul>(slot, T(a[0]), T(a[1]), OptT(a[2]));
        } else if (op == "cast") {
          Run<Cast>(slot, T(a[0]), Dtype(a[1]), OptT(a[2]));
        } else if (op == "cat") {
          Run<Cat>(slot, TList(a[0]), I(a[1]), OptT(a[2]));
        } else {
          return false;
        }
        return true;
      });
}
