#ifndef POLYOPS_CPU_ROTARY_EMBEDDING_OMP_H_
#define POLYOPS_CPU_ROTARY_EMBEDDING_OMP_H_

#include <cstdint>
#include <vector>

#include "base/rotary_embedding.h"
#include "core/dispatch.h"
#include "core/operator.h"
#include "cpu/kernels/rotary/rotary.h"

namespace polyops {

// Slot 0: positions are read once into a local copy and checked there, in
// one serial pass (an error cannot leave an OpenMP region, and nothing is
// written); the rotation uses only that copy, so a position changed by
// another thread meanwhile cannot index outside cos_sin_cache. Tokens spread
// over OpenMP threads; each token's cos/sin row is staged as float once and
// rotates every query and key head.
template <>
class Operator<RotaryEmbedding, Device::Type::kCpu, 0>
    : public RotaryEmbedding {
 public:
  static constexpr const char* kImplementationName = "omp";
  using RotaryEmbedding::RotaryEmbedding;

  void operator()(const Handle&, const Args& args) const override {
    if (position_dtype_ == DataType::kInt64) {
      Run(args.positions.data_as<const int64_t>(), args.query, args.key,
          args.cos_sin_cache, args.query_out, args.key_out);
    } else {
      Run(args.positions.data_as<const int32_t>(), args.query, args.key,
          args.cos_sin_cache, args.query_out, args.key_out);
    }
  }

 private:
  template <typename P>
  void Run(const P* positions, const Tensor& query,
           const std::optional<Tensor>& key, const Tensor& cos_sin_cache,
           const std::optional<Tensor>& query_out,
           const std::optional<Tensor>& key_out) const {
    std::vector<int64_t> checked(geometry_.tokens);
    for (int64_t t = 0; t < geometry_.tokens; ++t) {
      const int64_t position = cpu::ReadOnce(positions + t * position_stride_);
      checked[t] = position;
      POLYOPS_CHECK(position >= 0 && position < max_position_,
                    "polyops.rotary_embedding: positions[", t, "] = ", position,
                    " is out of range [0, ", max_position_,
                    ") (cos_sin_cache.shape[0])");
    }
    DispatchDataType<POLYOPS_FLOAT_TYPES>(
        dtype_, "polyops.rotary_embedding", [&](auto tag) {
          using T = typename decltype(tag)::type;
          auto rotate = [&](auto table_tag) {
            using C = typename decltype(table_tag)::type;
            const C* cache = cos_sin_cache.data_as<const C>();
            const int64_t half = geometry_.rotary_dim / 2;
            const int64_t row_stride = cache_stride_;
            cpu::RotaryApply<T, C>(
                geometry_, query.data_as<const T>(),
                (query_out ? *query_out : query).data_as<T>(),
                key ? key->data_as<const T>() : nullptr,
                key ? (key_out ? *key_out : *key).data_as<T>() : nullptr,
                [&](int64_t t, const C** cos, const C** sin) {
                  *cos = cache + checked[t] * row_stride;
                  *sin = *cos + half;
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

#endif  // POLYOPS_CPU_ROTARY_EMBEDDING_OMP_H_
