#ifndef POLYOPS_CPU_SILU_AND_MUL_VLLM_H_
#define POLYOPS_CPU_SILU_AND_MUL_VLLM_H_

#include <type_traits>

#include "base/silu_and_mul.h"
#include "core/dispatch.h"
#include "core/operator.h"
#include "cpu/kernels/elementwise/elementwise.h"
#include "cpu/kernels/elementwise/silu.h"
#include "cpu/runtime/convert.h"

namespace polyops {

// Slot 1: vLLM's rounding order, for code that must match vLLM bit for bit
// (polyops.integrations.vllm registers it as _C::silu_and_mul). vLLM's CUDA
// kernel and its reference F.silu(x[..., :d]) * x[..., d:] both round
// silu(gate) to the input dtype before multiplying, then round the product:
// for float16/bfloat16 that is two roundings where slot 0 has one, so the
// two slots differ by up to an ulp or two of the result in about a quarter
// of the elements. The product of two float16/bfloat16 values is exact in
// float32, so rounding it once to the dtype is the dtype's own multiply.
// float32 has one order either way: this slot equals slot 0 there.
template <>
class Operator<SiluAndMul, Device::Type::kCpu, 1> : public SiluAndMul {
 public:
  static constexpr const char* kImplementationName = "vllm";
  using SiluAndMul::SiluAndMul;

  void operator()(const Handle&, const Args& args) const override {
    DispatchDataType<POLYOPS_FLOAT_TYPES>(
        dtype_, "polyops.silu_and_mul", [&](auto tag) {
          using T = typename decltype(tag)::type;
          cpu::MapBlocks<T, 3, /*kIsaVariants=*/true>(
              layout_, {args.out->data(), args.input.data(), args.input.data()},
              {0, 0, up_offset_}, /*parallel=*/true,
              [](float* y, const float* const* x, int64_t n) {
                if constexpr (std::is_same_v<T, float>) {
                  for (int64_t i = 0; i < n; ++i)
                    y[i] = cpu::Silu(x[0][i]) * x[1][i];
                } else {
                  // silu rounded to T and widened back, through the same
                  // block conversions that store the result.
                  float silu[cpu::kBlock];
                  T rounded[cpu::kBlock];
                  for (int64_t i = 0; i < n; ++i) silu[i] = cpu::Silu(x[0][i]);
                  cpu::StoreBlock<T>(silu, rounded, 1, n);
                  cpu::LoadBlock<T>(rounded, 1, silu, n);
                  for (int64_t i = 0; i < n; ++i) y[i] = silu[i] * x[1][i];
                }
              });
        });
  }
};

}  // namespace polyops

#endif  // POLYOPS_CPU_SILU_AND_MUL_VLLM_H_
