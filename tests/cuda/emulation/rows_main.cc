// Runs one call of a row-wise CUDA slot under the host emulation
// (emulated_cuda.h) on the tensors of a manifest (driver.h) that
// tests/cuda/test_cuda_rows_emulated.py writes.
#include <string>

#include "emulated_cuda.h"
// The slot headers, rewritten (launches) by the test into its build folder.
#include "cuda/add_rms_norm/vector.cuh"
#include "cuda/apply_rotary_pos_emb/token.cuh"
#include "cuda/causal_softmax/vector.cuh"
#include "cuda/reshape_and_cache/vector.cuh"
#include "cuda/rms_norm/vector.cuh"
#include "cuda/rotary_embedding/token.cuh"
#include "cuda/silu_and_mul/vector.cuh"
#include "cuda/silu_and_mul/vllm.cuh"
#include "cuda/swiglu/vector.cuh"
#include "driver.h"

int main(int argc, char** argv) {
  using namespace emulation;  // NOLINT: the argument accessors
  using namespace polyops;    // NOLINT: the op classes
  return DriverMain(
      argc, argv, [](const std::string& op, int slot, const Args& a) {
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
          Run<RotaryEmbedding>(slot, T(a[0]), T(a[1]), OptT(a[2]), I(a[3]),
                               T(a[4]), B(a[5]), OptI(a[6]), OptT(a[7]),
                               OptT(a[8]));
        } else if (op == "apply_rotary_pos_emb") {
          Run<ApplyRotaryPosEmb>(slot, T(a[0]), OptT(a[1]), T(a[2]), T(a[3]),
                                 B(a[4]), OptT(a[5]), OptT(a[6]));
        } else if (op == "reshape_and_cache") {
          Run<ReshapeAndCache>(slot, T(a[0]), T(a[1]), T(a[2]), T(a[3]),
                               T(a[4]));
        } else {
          return false;
        }
        return true;
      });
}
