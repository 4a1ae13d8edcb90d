#ifndef POLYOPS_CPU_APPLY_ROTARY_POS_EMB_OMP_H_
#define POLYOPS_CPU_APPLY_ROTARY_POS_EMB_OMP_H_

#include <cstdint>

#include "base/apply_rotary_pos_emb.h"
#include "core/dispatch.h"
#include "core/operator.h"
#include "cpu/kernels/rotary/rotary.h"

namespace polyops {

// Slot 0: rotary_embedding's kernel (cpu/kernels/rotary/rotary.h) with cos/sin
// rows taken per token instead of gathered by position.
template <>
class Operator<ApplyRotaryPosEmb, Device::Type::kCpu, 0>
    : public ApplyRotaryPosEmb {
 public:
  static constexpr const char* kImplementationName = "omp";
  using ApplyRotaryPosEmb::ApplyRotaryPosEmb;

  void operator()(const Handle&, const Args& args) const override {
    DispatchDataType<POLYOPS_FLOAT_TYPES>(
        dtype_, "polyops.apply_rotary_pos_emb", [&](auto tag) {
          using T = typename decltype(tag)::type;
          auto rotate = [&](auto table_tag) {
            using C = typename decltype(table_tag)::type;
            const C* cos_data = args.cos.data_as<const C>();
            const C* sin_data = args.sin.data_as<const C>();
            const int64_t cos_stride = cos_stride_;
            const int64_t sin_stride = sin_stride_;
            cpu::RotaryApply<T, C>(
                geometry_, args.query.data_as<const T>(),
                (args.query_out ? *args.query_out : args.query).data_as<T>(),
                args.key ? args.key->data_as<const T>() : nullptr,
                args.key
                    ? (args.key_out ? *args.key_out : *args.key).data_as<T>()
                    : nullptr,
                [&](int64_t t, const C** cos_row, const C** sin_row) {
                  *cos_row = cos_data + t * cos_stride;
                  *sin_row = sin_data + t * sin_stride;
                });
          };
          if (table_dtype_ == DataType::kFloat32) {
            rotate(TypeTag<float>{});
          } else {
            rotate(TypeTag<T>{});
          }
        });
  }
};

}  // namespace polyops

#endif  // POLYOPS_CPU_APPLY_ROTARY_POS_EMB_OMP_H_
