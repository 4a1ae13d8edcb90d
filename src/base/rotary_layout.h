// Shared argument handling of rotary_embedding and apply_rotary_pos_emb (a
// helper header: it declares no op).
#ifndef POLYOPS_BASE_ROTARY_LAYOUT_H_
#define POLYOPS_BASE_ROTARY_LAYOUT_H_

#include <cstdint>
#include <optional>

#include "core/checks.h"
#include "core/tensor.h"

namespace polyops {

// Where the heads of a query or key tensor sit: [T, H * D] or [T, H, D] with
// the head dim contiguous, any token (and head) strides.
struct RotaryHeads {
  int64_t heads = 0;
  int64_t token_stride = 0;
  int64_t head_stride = 0;
};

// Everything the rotation kernel needs, from geometry only.
struct RotaryGeometry {
  int64_t tokens = 0;
  int64_t head_size = 0;
  int64_t rotary_dim = 0;
  bool neox = true;
  bool has_key = false;
  // Out of place: the tail of each head past rotary_dim is copied through.
  bool query_in_place = true;
  bool key_in_place = true;
  RotaryHeads query, query_out, key, key_out;
};

// The heads of `tensor` ([T, H * D] or [T, H, D]) for head size `head_size`.
inline RotaryHeads ReadRotaryHeads(const char* op, const char* name,
                                   const Tensor& tensor, int64_t tokens,
                                   int64_t head_size) {
  POLYOPS_CHECK(tensor.ndim() == 2 || tensor.ndim() == 3, "polyops.", op, ": ",
                name, " must be [T, H * ", head_size, "] or [T, H, ", head_size,
                "], got shape ", tensor.ShapeString());
  POLYOPS_CHECK(tensor.size(0) == tokens, "polyops.", op, ": ", name,
                " must have ", tokens, " tokens in dim 0, got shape ",
                tensor.ShapeString());
  CheckLastDimContiguous(op, name, tensor);
  RotaryHeads heads;
  heads.token_stride = tensor.stride(0);
  if (tensor.ndim() == 3) {
    POLYOPS_CHECK(tensor.size(2) == head_size, "polyops.", op, ": ", name,
                  " must have head size ", head_size,
                  " in its last dim, got shape ", tensor.ShapeString());
    heads.heads = tensor.size(1);
    heads.head_stride = tensor.stride(1);
  } else {
    POLYOPS_CHECK(tensor.size(1) % head_size == 0, "polyops.", op, ": ", name,
                  " must be [T, H * ", head_size,
                  "] (its last dim a multiple of the head size), got shape ",
                  tensor.ShapeString());
    heads.heads = tensor.size(1) / head_size;
    heads.head_stride = head_size;
  }
  return heads;
}

// Checks query/key and their optional outputs and fills the geometry's
// tensors part (head_size and rotary_dim already set and checked).
inline void ReadRotaryOperands(const char* op, RotaryGeometry& geometry,
                               const Tensor& query,
                               const std::optional<Tensor>& key,
                               const std::optional<Tensor>& query_out,
                               const std::optional<Tensor>& key_out) {
  CheckFloatDtype(op, "query", query);
  geometry.tokens = query.ndim() >= 1 ? query.size(0) : 0;
  geometry.query =
      ReadRotaryHeads(op, "query", query, geometry.tokens, geometry.head_size);
  geometry.query_out = geometry.query;
  geometry.query_in_place = !query_out.has_value();
  if (query_out) {
    CheckSameDtype(op, "query_out", *query_out, "query", query);
    CheckSameShape(op, "query_out", *query_out, "query", query);
    geometry.query_out = ReadRotaryHeads(op, "query_out", *query_out,
                                         geometry.tokens, geometry.head_size);
  }
  geometry.has_key = key.has_value();
  POLYOPS_CHECK(key.has_value() || !key_out.has_value(), "polyops.", op,
                ": key_out must be None when key is None");
  if (key) {
    CheckSameDtype(op, "key", *key, "query", query);
    geometry.key =
        ReadRotaryHeads(op, "key", *key, geometry.tokens, geometry.head_size);
    geometry.key_out = geometry.key;
    geometry.key_in_place = !key_out.has_value();
    if (key_out) {
      CheckSameDtype(op, "key_out", *key_out, "key", *key);
      CheckSameShape(op, "key_out", *key_out, "key", *key);
      geometry.key_out = ReadRotaryHeads(op, "key_out", *key_out,
                                         geometry.tokens, geometry.head_size);
    }
  }
}

// cos/sin tables: query's dtype or float32.
inline void CheckRotaryTableDtype(const char* op, const char* name,
                                  const Tensor& table, const Tensor& query) {
  POLYOPS_CHECK(
      table.dtype() == query.dtype() || table.dtype() == DataType::kFloat32,
      "polyops.", op, ": ", name, " must have the dtype of query (",
      DataTypeName(query.dtype()), ") or float32, got ",
      DataTypeName(table.dtype()));
}

}  // namespace polyops

#endif  // POLYOPS_BASE_ROTARY_LAYOUT_H_
