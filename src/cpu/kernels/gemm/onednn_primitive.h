// oneDNN matmul primitives for onednn.h's Gemm: creating one for a set of
// operand layouts and post-ops, and running it on the caller's pointers.
// Included only where POLYOPS_WITH_ONEDNN is defined.
#ifndef POLYOPS_CPU_KERNELS_GEMM_ONEDNN_PRIMITIVE_H_
#define POLYOPS_CPU_KERNELS_GEMM_ONEDNN_PRIMITIVE_H_

#include <oneapi/dnnl/dnnl.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "cpu/kernels/gemm/onednn_library.h"

namespace polyops::cpu::onednn {

// A created matmul primitive with its memory descriptors (needed per call
// to wrap the caller's pointers); handle == nullptr records that oneDNN has
// no implementation (or only a reference one) for the key.
struct Primitive {
  std::shared_ptr<const Library> library;
  dnnl_primitive_t handle = nullptr;
  std::array<dnnl_memory_desc_t, 3> mds{};  // src, weights, dst
  std::string impl;

  ~Primitive() {
    const Api& api = library->api;
    if (handle != nullptr) api.dnnl_primitive_destroy(handle);
    for (dnnl_memory_desc_t md : mds) {
      if (md != nullptr) api.dnnl_memory_desc_destroy(md);
    }
  }
};

// A rows x cols operand of the oneDNN product, batch-major.
struct Matrix {
  int64_t batch;  // 1 when shared by the batch
  int64_t rows, cols;
  int64_t batch_stride, row_stride, col_stride;
};

// A primitive computing dst = alpha * src @ weights (+ beta * dst when
// use_sum) for operands {src, weights, dst} of dtype dt, ndims 2 (batch
// ignored) or 3. Its handle is null when oneDNN has no implementation or
// only a reference one. Throws BackendError naming `op` on other failures.
std::shared_ptr<const Primitive> CreatePrimitive(
    const std::shared_ptr<const Library>& library, const char* op,
    dnnl_data_type_t dt, int ndims, const std::array<Matrix, 3>& operands,
    float alpha, bool use_sum, float beta);

// Runs `primitive` (handle not null) on this thread's stream and waits for
// it. Throws BackendError naming `op` when a oneDNN call fails.
void ExecutePrimitive(const Library& library, const char* op,
                      const Primitive& primitive, const void* src,
                      const void* weights, void* dst);

}  // namespace polyops::cpu::onednn

#endif  // POLYOPS_CPU_KERNELS_GEMM_ONEDNN_PRIMITIVE_H_
