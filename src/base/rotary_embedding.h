#ifndef POLYOPS_BASE_ROTARY_EMBEDDING_H_
#define POLYOPS_BASE_ROTARY_EMBEDDING_H_

#include <cstdint>
#include <optional>

#include "base/rotary_layout.h"
#include "core/checks.h"
#include "core/handle.h"
#include "core/instance_cache.h"

namespace polyops {

// rotary_embedding(positions, query, key, head_size, cos_sin_cache, ...)
//
// vLLM's rotary position embedding. For token t at position p = positions[t],
// cos = cos_sin_cache[p, :rotary_dim/2], sin = cos_sin_cache[p, rotary_dim/2:]
// and each head x of query and key rotates its first rotary_dim dims:
//   neox style (is_neox_style=True) pairs x[i] with x[i + rotary_dim/2],
//   GPT-J style (False) pairs x[2i] with x[2i + 1]; for a pair (x1, x2):
//   x1' = x1 * cos[i] - x2 * sin[i],  x2' = x2 * cos[i] + x1 * sin[i],
// computed in float32. Dims past rotary_dim (partial rotary) are unchanged.
//   positions:     [T], int64 or int32, any stride. Every position must be
//                  in [0, max_pos): the CPU kernel reads each once into a
//                  copy, checks the copies before rotating anything (else
//                  ValueError naming the token) and indexes the table with
//                  the copies only (an accelerator backend could not check
//                  without a copy to the host).
//   query:         [T, Hq * head_size] or [T, Hq, head_size], float16,
//                  bfloat16 or float32; head dim contiguous, other strides
//                  free.
//   key:           None, or like query with its own head count Hkv.
//   head_size:     > 0.
//   cos_sin_cache: [max_pos, rotary_dim], query's dtype or float32, last dim
//                  contiguous.
//   rotary_dim:    even, in (0, head_size]; defaults to
//                  cos_sin_cache.shape[1] and must equal it when given.
//   query_out, key_out: omitted means in place on query / key (key_out is
//                  then key, None for key None); given, they take the
//                  result (their input's shape and dtype, head dim
//                  contiguous), the rotary-free dims are copied, and the
//                  inputs are left untouched. key_out must be None when key
//                  is None. Outputs must not partially overlap the inputs.
// Returns (query_out, key_out).
class RotaryEmbedding : public OperatorBase {
 public:
  static constexpr const char* kName = "rotary_embedding";
  static constexpr int kNumPositional = 6;

  // The call's arguments, in the constructor's order. Slots take them as
  // one struct: a new parameter touches this header and the slots that
  // read it.
  struct Args {
    const Tensor& positions;
    const Tensor& query;
    const std::optional<Tensor>& key;
    int64_t head_size;
    const Tensor& cos_sin_cache;
    bool is_neox_style;
    std::optional<int64_t> rotary_dim;
    const std::optional<Tensor>& query_out;
    const std::optional<Tensor>& key_out;
  };

  RotaryEmbedding(const Tensor& positions, const Tensor& query,
                  const std::optional<Tensor>& key, int64_t head_size,
                  const Tensor& cos_sin_cache, bool is_neox_style = true,
                  std::optional<int64_t> rotary_dim = std::nullopt,
                  const std::optional<Tensor>& query_out = std::nullopt,
                  const std::optional<Tensor>& key_out = std::nullopt) {
    POLYOPS_CHECK(head_size > 0,
                  "polyops.rotary_embedding: head_size must be > 0, got ",
                  head_size);
    POLYOPS_CHECK(cos_sin_cache.ndim() == 2,
                  "polyops.rotary_embedding: cos_sin_cache must be [max_pos, "
                  "rotary_dim], got shape ",
                  cos_sin_cache.ShapeString());
    const int64_t width = cos_sin_cache.size(1);
    const int64_t rotary = rotary_dim.value_or(width);
    POLYOPS_CHECK(rotary == width,
                  "polyops.rotary_embedding: rotary_dim must equal "
                  "cos_sin_cache.shape[1] (",
                  width, "), got ", rotary);
    POLYOPS_CHECK(rotary > 0 && rotary % 2 == 0 && rotary <= head_size,
                  "polyops.rotary_embedding: rotary_dim (cos_sin_cache."
                  "shape[1]) must be even and in (0, head_size=",
                  head_size, "], got ", rotary);
    geometry_.head_size = head_size;
    geometry_.rotary_dim = rotary;
    geometry_.neox = is_neox_style;
    ReadRotaryOperands(kName, geometry_, query, key, query_out, key_out);
    POLYOPS_CHECK(
        positions.ndim() == 1 && positions.size(0) == geometry_.tokens,
        "polyops.rotary_embedding: positions must have shape [",
        geometry_.tokens, "] (query's tokens), got ", positions.ShapeString());
    POLYOPS_CHECK(positions.dtype() == DataType::kInt64 ||
                      positions.dtype() == DataType::kInt32,
                  "polyops.rotary_embedding: positions must be int64 or "
                  "int32, got ",
                  DataTypeName(positions.dtype()));
    CheckRotaryTableDtype(kName, "cos_sin_cache", cos_sin_cache, query);
    CheckLastDimContiguous(kName, "cos_sin_cache", cos_sin_cache);
    max_position_ = cos_sin_cache.size(0);
    position_stride_ = positions.stride(0);
    cache_stride_ = cos_sin_cache.stride(0);
    position_dtype_ = positions.dtype();
    table_dtype_ = cos_sin_cache.dtype();
    dtype_ = query.dtype();
  }

  explicit RotaryEmbedding(const Args& args)
      : RotaryEmbedding(args.positions, args.query, args.key, args.head_size,
                        args.cos_sin_cache, args.is_neox_style, args.rotary_dim,
                        args.query_out, args.key_out) {}

  virtual void operator()(const Handle& handle, const Args& args) const = 0;

 protected:
  RotaryGeometry geometry_;
  int64_t max_position_ = 0;
  int64_t position_stride_ = 1;
  int64_t cache_stride_ = 0;
  DataType position_dtype_ = DataType::kInt64;
  DataType table_dtype_ = DataType::kFloat32;
  DataType dtype_ = DataType::kFloat32;
};

}  // namespace polyops

#endif  // POLYOPS_BASE_ROTARY_EMBEDDING_H_
