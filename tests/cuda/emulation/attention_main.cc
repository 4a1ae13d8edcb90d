// Runs one call of the own CUDA attention slots (flash_attention and
// paged_attention slot 0, cuda/kernels/attention/attention.cuh) under the host
// emulation (emulated_cuda.h) on the tensors of a manifest (driver.h) that
// tests/cuda/test_cuda_attention_emulated.py writes.
#include <string>

#include "emulated_cuda.h"
// The slot headers, rewritten by the test into its build folder.
#include "cuda/flash_attention/flash.cuh"
#include "cuda/paged_attention/flash.cuh"
#include "driver.h"

int main(int argc, char** argv) {
  using namespace emulation;  // NOLINT: the argument accessors
  using namespace polyops;    // NOLINT: the op classes
  return DriverMain(
      argc, argv, [](const std::string& op, int slot, const Args& a) {
        if (op == "flash_attention") {
          Run<FlashAttention>(slot, T(a[0]), T(a[1]), T(a[2]), T(a[3]), T(a[4]),
                              OptT(a[5]), OptD(a[6]), B(a[7]), I(a[8]), I(a[9]),
                              OptI(a[10]), OptT(a[11]), OptT(a[12]),
                              OptT(a[13]));
        } else if (op == "paged_attention") {
          Run<PagedAttention>(slot, T(a[0]), T(a[1]), T(a[2]), T(a[3]), T(a[4]),
                              OptD(a[5]), OptT(a[6]), OptT(a[7]), OptT(a[8]));
        } else {
          return false;
        }
        return true;
      });
}
