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

  void operator()(const Handle&, const Tensor& query,
                  const std::optional<Tensor>& key, const Tensor& cos,
                  const Tensor& sin, bool,
                  const std::optional<Tensor>& query_out,
                  const std::optional<Tensor>& key_out) const override {
    DispatchDataType<POLYOPS_FLOAT_TYPES>(
        dtype_, "polyops.apply_rotary_pos_emb", [&](auto tag) {
          using T = typename decltype(tag)::type;
          auto rotate = [&](auto table_tag) {
            using C = typename decltype(table_tag)::type;
            const C* cos_data = cos.data_as<const C>();
            const C* sin_data = sin.data_as<const C>();
            const int64_t cos_stride = cos_stride_;
            const int64_t sin_stride = sin_stride_;
            cpu::RotaryApply<T, C>(
                geometry_, query.data_as<const T>(),
                (query_out ? *query_out : query).data_as<T>(),
                key ? key->data_as<const T>() : nullptr,
                key ? (key_out ? *key_out : *key).data_as<T>() : nullptr,
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
