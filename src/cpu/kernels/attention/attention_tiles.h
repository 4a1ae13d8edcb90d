// The blocked online-softmax tile kernel of the CPU attention ops: one
// tile of query rows against its visible keys, templated on the rows per
// group and the vector type so that attention.h can pick an ISA variant.
#ifndef POLYOPS_CPU_KERNELS_ATTENTION_ATTENTION_TILES_H_
#define POLYOPS_CPU_KERNELS_ATTENTION_ATTENTION_TILES_H_

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/data_type.h"
#include "cpu/kernels/attention/attention_sequences.h"
#include "cpu/kernels/attention/attention_vectors.h"
#include "cpu/kernels/rows/row_kernels.h"
#include "cpu/runtime/convert.h"

namespace polyops::cpu {

// Where the operands live; strides in elements. Contiguous kv when
// block_size == 0 (block strides unused).
template <typename T>
struct AttentionArgs {
  const T* query;
  int64_t q_stride_token, q_stride_head;
  T* out;
  int64_t o_stride_token, o_stride_head;
  const T* key;
  int64_t k_stride_block, k_stride_token, k_stride_head;
  const T* value;
  int64_t v_stride_block, v_stride_token, v_stride_head;
  int64_t head_size;
  int64_t group;  // query heads per kv head
  int64_t block_size;
  float scale;
  bool causal;
  int64_t window_left, window_right;
};

// A tile: query tokens [token_begin, +tokens) of one sequence times query
// heads [head_begin, +heads), all sharing one kv head.
struct AttentionTile {
  int64_t sequence;
  int64_t token_begin, tokens;
  int64_t head_begin, heads;
};

// Tile sizes. A tile has at most kTileFloats / head_size (and kMaxTileRows)
// query rows; keys stream through in kKeyTile pieces. The stack holds
// 2 * kTileFloats + kKeyTile * (kMaxTileHead + ValueStride(kMaxTileHead))
// floats (260 KiB) per thread.
inline constexpr int64_t kKeyTile = 64;
inline constexpr int64_t kMaxTileHead = 256;
inline constexpr int64_t kTileFloats = 16384;
inline constexpr int64_t kMaxTileRows = 128;

inline int64_t MaxTileRows(int64_t head_size) {
  return std::min(kMaxTileRows, kTileFloats / head_size);
}

template <typename T>
POLYOPS_INLINE const T* KvRow(const T* base, int64_t stride_block,
                              int64_t stride_token, int64_t stride_head,
                              const AttentionSequence& seq, int64_t block_size,
                              int64_t j, int64_t kv_head) {
  if (block_size > 0) {
    return base + seq.blocks[j / block_size] * stride_block +
           (j % block_size) * stride_token + kv_head * stride_head;
  }
  return base + (seq.kv_start + j) * stride_token + kv_head * stride_head;
}

// s[r * kKeyTile + c] = scale * dot(q row r, key c) for kRows query rows
// (q rows d_size apart) against a staged key piece kt (transposed: d_size
// rows of kKeyTile), in column blocks of kVecs vectors: the kRows * kVecs
// accumulators stay in registers, so each key vector loaded serves kRows
// rows and each q broadcast kVecs vectors; each dot sums in d order.
inline constexpr int64_t kKeyVecs = kKeyTile / kLanes;
static_assert(kKeyTile == kKeyVecs * kLanes, "a key piece is whole vectors");

template <int64_t kRows, typename V = Float16v>
POLYOPS_INLINE void ScoreRows(const float* q, int64_t d_size, const float* kt,
                              float scale, float* s) {
  constexpr int64_t kL = kLanesOf<V>;
  constexpr int64_t kVecs = FloorPow2(std::max<int64_t>(
      1, std::min(kKeyTile / kL, kAccumulatorsOf<V> / kRows)));
  static_assert(kKeyTile % (kVecs * kL) == 0, "whole column blocks");
#pragma GCC unroll 1
  for (int64_t c0 = 0; c0 < kKeyTile; c0 += kVecs * kL) {
    V acc[kRows][kVecs];
#pragma GCC unroll 16
    for (int64_t r = 0; r < kRows; ++r) {
#pragma GCC unroll 16
      for (int64_t v = 0; v < kVecs; ++v) acc[r][v] = V{};
    }
    for (int64_t d = 0; d < d_size; ++d) {
      V k[kVecs];
#pragma GCC unroll 16
      for (int64_t v = 0; v < kVecs; ++v) {
        k[v] = Load<V>(kt + d * kKeyTile + c0 + v * kL);
      }
#pragma GCC unroll 16
      for (int64_t r = 0; r < kRows; ++r) {
        const float qd = q[r * d_size + d];
#pragma GCC unroll 16
        for (int64_t v = 0; v < kVecs; ++v) acc[r][v] += qd * k[v];
      }
    }
#pragma GCC unroll 16
    for (int64_t r = 0; r < kRows; ++r) {
#pragma GCC unroll 16
      for (int64_t v = 0; v < kVecs; ++v) {
        Store<V>(s + r * kKeyTile + c0 + v * kL, acc[r][v] * scale);
      }
    }
  }
}

// Floats between two staged value rows: d_size rounded up to whole 64-byte
// lines, and to an odd number of them. The value blocks below walk one
// column of all 64 rows per 16 dims; with rows 512 bytes apart (head size
// 128) those 64 lines fall in 8 of the 64 L1 sets and evict each other.
constexpr int64_t ValueStride(int64_t d_size) {
  const int64_t lines = (d_size + 15) / 16;
  return 16 * (lines % 2 == 0 ? lines + 1 : lines);
}

// Dims [d0, d0 + lanes * kVecs) of AccumulateValues for kRows rows
// (accumulators d_size apart, p rows p_stride apart) over the same n value
// rows (ValueStride(d_size) apart), the kRows * kVecs accumulators held in
// registers across the rows: each value vector loaded serves kRows rows, each p
// broadcast kVecs vectors; each dim sums in key order.
template <int64_t kRows, int64_t kVecs, typename V>
POLYOPS_INLINE void AccumulateValueBlock(float* o, int64_t d_size, int64_t d0,
                                         const float* correction,
                                         const float* p, int64_t p_stride,
                                         const float* vs, int64_t n) {
  constexpr int64_t kL = kLanesOf<V>;
  const int64_t vs_stride = ValueStride(d_size);
  V acc[kRows][kVecs];
#pragma GCC unroll 16
  for (int64_t r = 0; r < kRows; ++r) {
#pragma GCC unroll 16
    for (int64_t k = 0; k < kVecs; ++k) {
      acc[r][k] = Load<V>(o + r * d_size + d0 + k * kL) * correction[r];
    }
  }
  for (int64_t c = 0; c < n; ++c) {
    V v[kVecs];
#pragma GCC unroll 16
    for (int64_t k = 0; k < kVecs; ++k) {
      v[k] = Load<V>(vs + c * vs_stride + d0 + k * kL);
    }
#pragma GCC unroll 16
    for (int64_t r = 0; r < kRows; ++r) {
      const float pc = p[r * p_stride + c];
#pragma GCC unroll 16
      for (int64_t k = 0; k < kVecs; ++k) acc[r][k] += pc * v[k];
    }
  }
#pragma GCC unroll 16
  for (int64_t r = 0; r < kRows; ++r) {
#pragma GCC unroll 16
    for (int64_t k = 0; k < kVecs; ++k) {
      Store<V>(o + r * d_size + d0 + k * kL, acc[r][k]);
    }
  }
}

// Dims [d0, d_size) one by one, the same operations per element as the
// vector blocks.
template <int64_t kRows>
POLYOPS_INLINE void AccumulateValueTail(float* o, int64_t d_size, int64_t d0,
                                        const float* correction, const float* p,
                                        int64_t p_stride, const float* vs,
                                        int64_t n) {
  const int64_t vs_stride = ValueStride(d_size);
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t d = d0; d < d_size; ++d) {
      float value = o[r * d_size + d] * correction[r];
      for (int64_t c = 0; c < n; ++c) {
        value += p[r * p_stride + c] * vs[c * vs_stride + d];
      }
      o[r * d_size + d] = value;
    }
  }
}

// o = o * correction + sum_c p[c] * v[c] over n value rows, one row: 8
// vectors at a time (8 independent add chains, so one row is not bound by
// the add latency), then 2, then one by one; each dim sums in key order.
template <typename V = Float16v>
POLYOPS_INLINE void AccumulateValues(float* o, int64_t d_size, float correction,
                                     const float* p, const float* vs,
                                     int64_t n) {
  constexpr int64_t kL = kLanesOf<V>;
  int64_t d0 = 0;
  for (; d0 + 8 * kL <= d_size; d0 += 8 * kL) {
    AccumulateValueBlock<1, 8, V>(o, d_size, d0, &correction, p, 0, vs, n);
  }
  for (; d0 + 2 * kL <= d_size; d0 += 2 * kL) {
    AccumulateValueBlock<1, 2, V>(o, d_size, d0, &correction, p, 0, vs, n);
  }
  AccumulateValueTail<1>(o, d_size, d0, &correction, p, 0, vs, n);
}

// AccumulateValues for kRows rows (p rows kKeyTile apart) over the same n
// value rows, in blocks of kRows x (accumulator budget / kRows) vectors,
// then kRows x 2, then one by one. Every element sees the same operations
// in the same order as in AccumulateValues, so the two give the same bits.
template <int64_t kRows, typename V = Float16v>
POLYOPS_INLINE void AccumulateValueRows(float* o, int64_t d_size,
                                        const float* correction, const float* p,
                                        const float* vs, int64_t n) {
  constexpr int64_t kL = kLanesOf<V>;
  constexpr int64_t kVecs = std::clamp<int64_t>(
      FloorPow2(std::max<int64_t>(1, kAccumulatorsOf<V> / kRows)), 2, 8);
  int64_t d0 = 0;
  if constexpr (kVecs > 2) {
    for (; d0 + kVecs * kL <= d_size; d0 += kVecs * kL) {
      AccumulateValueBlock<kRows, kVecs, V>(o, d_size, d0, correction, p,
                                            kKeyTile, vs, n);
    }
  }
  for (; d0 + 2 * kL <= d_size; d0 += 2 * kL) {
    AccumulateValueBlock<kRows, 2, V>(o, d_size, d0, correction, p, kKeyTile,
                                      vs, n);
  }
  AccumulateValueTail<kRows>(o, d_size, d0, correction, p, kKeyTile, vs, n);
}

// Running state of a tile's query rows: max, per-lane partial sums of the
// exps (reduced once at the end, in a fixed order), float32 accumulators.
struct TileState {
  float* row_max;
  Float16v* row_sum;
  float* acc;
};

// kt[d * kKeyTile + c] = rows[c][d] for c < n and 0 for n <= c < kKeyTile
// (the padding keys score 0 and are masked): kL x kL blocks transposed in
// registers of the variant's vector V, a scalar loop for the last
// d_size % kL dims. Rows of float or bfloat16 (converted as loaded).
template <typename V, typename T>
POLYOPS_INLINE void TransposeKeys(const T* const* rows, int64_t n,
                                  int64_t d_size, float* kt) {
  constexpr int64_t kL = kLanesOf<V>;
  const int64_t d_vec = d_size - d_size % kL;
  for (int64_t c0 = 0; c0 < kKeyTile; c0 += kL) {
    for (int64_t d0 = 0; d0 < d_vec; d0 += kL) {
      V m[kL];
#pragma GCC unroll 16
      for (int64_t i = 0; i < kL; ++i) {
        m[i] = c0 + i < n ? LoadKeys<V>(rows[c0 + i] + d0) : V{};
      }
      TransposeSquare(m);
#pragma GCC unroll 16
      for (int64_t i = 0; i < kL; ++i) {
        Store<V>(kt + (d0 + i) * kKeyTile + c0, m[i]);
      }
    }
  }
  for (int64_t d = d_vec; d < d_size; ++d) {
    for (int64_t c = 0; c < kKeyTile; ++c) {
      kt[d * kKeyTile + c] =
          c < n ? static_cast<float>(Load(rows[c] + d)) : 0.0f;
    }
  }
}

// Asks for kv rows [begin, end) of kv_head (keys and values) to be brought
// into the cache.
template <typename T>
POLYOPS_INLINE void PrefetchKvRows(const AttentionArgs<T>& a,
                                   const AttentionSequence& seq,
                                   int64_t kv_head, int64_t begin,
                                   int64_t end) {
  const int64_t bytes = a.head_size * static_cast<int64_t>(sizeof(T));
  for (int64_t j = begin; j < end; ++j) {
    const char* k = reinterpret_cast<const char*>(
        KvRow(a.key, a.k_stride_block, a.k_stride_token, a.k_stride_head, seq,
              a.block_size, j, kv_head));
    const char* v = reinterpret_cast<const char*>(
        KvRow(a.value, a.v_stride_block, a.v_stride_token, a.v_stride_head, seq,
              a.block_size, j, kv_head));
    for (int64_t offset = 0; offset < bytes; offset += 64) {
      __builtin_prefetch(k + offset);
      __builtin_prefetch(v + offset);
    }
  }
}

// One staged kv piece (n keys from c0; kt transposed keys, vs values) for
// query rows [r0, r0 + kRows) of a tile: scores, online softmax, values.
// kValueRows rows share each value load (a register budget: AccumulateValueRows
// holds 2 or 4 accumulators per row).
template <int64_t kRows, int64_t kValueRows, typename V, typename T>
POLYOPS_INLINE void AttendRows(const AttentionArgs<T>& a,
                               const AttentionSequence& seq,
                               const AttentionTile& tile, int64_t r0,
                               int64_t c0, int64_t n, bool unmasked,
                               const float* qs, const float* kt,
                               const float* vs, float* s, TileState state) {
  static_assert(kRows <= kLanes && kRows % kValueRows == 0);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t d_size = a.head_size;
  if (!unmasked) {
    // Visible ranges only move right from row to row, so when the first
    // row's range starts past the piece or the last row's ends before it,
    // no row of the group sees a key here (causal tiles above the diagonal).
    const KeyRange first =
        VisibleKeys(tile.token_begin + r0 / tile.heads, seq.q_len, seq.kv_len,
                    a.causal, a.window_left, a.window_right);
    const KeyRange last =
        VisibleKeys(tile.token_begin + (r0 + kRows - 1) / tile.heads, seq.q_len,
                    seq.kv_len, a.causal, a.window_left, a.window_right);
    if (first.lo >= c0 + n || last.hi < c0) return;
  }
  ScoreRows<kRows, V>(qs + r0 * d_size, d_size, kt, a.scale, s);
  // The row's visible keys in this piece, [c0 + begin, c0 + end): the
  // others are left out of the value sum, not weighted by 0, so a NaN or
  // inf in a masked value (0 * inf = NaN) never reaches the row.
  int64_t begin[kRows], end[kRows];
  // The keys every row of the group sees, [shared_begin, shared_end): their
  // value rows are shared between the rows' sums (the whole piece off the
  // diagonal of a causal tile, most of it on the diagonal).
  int64_t shared_begin = 0, shared_end = n;
  for (int64_t k = 0; k < kRows; ++k) {
    begin[k] = 0, end[k] = n;
    if (unmasked) continue;
    const int64_t r = r0 + k;
    const KeyRange range =
        VisibleKeys(tile.token_begin + r / tile.heads, seq.q_len, seq.kv_len,
                    a.causal, a.window_left, a.window_right);
    begin[k] = std::clamp<int64_t>(range.lo - c0, 0, n);
    end[k] = std::clamp<int64_t>(range.hi - c0 + 1, 0, n);
    shared_begin = std::max(shared_begin, begin[k]);
    shared_end = std::min(shared_end, end[k]);
    if (begin[k] == 0 && end[k] == kKeyTile) continue;
    float* sr = s + k * kKeyTile;
    for (int64_t c = 0; c < kKeyTile; ++c) {
      if (c < begin[k] || c >= end[k]) sr[c] = kNegInf;
    }
  }
  // The running maxes first, so one exp per kL rows (a vector V, lane k
  // for row k, spare lanes exp(0)) gives every row's correction factor
  // exp(old max - new max). A Float16v of partial sums, maxes or exps is
  // kHalves vectors V here: lane l of half h is lane h * kL + l of the
  // Float16v, with the same operations in the same order. (Float16v itself
  // is not one AVX2 register: GCC split its selects lane by lane.)
  constexpr int64_t kL = kLanesOf<V>;
  constexpr int64_t kHalves = kLanes / kL;
  constexpr int64_t kRowVecs = (kRows + kL - 1) / kL;
  float shift[kRows];
  alignas(64) float old_minus_shift[kRowVecs * kL] = {};
  for (int64_t k = 0; k < kRows; ++k) {
    const float* sr = s + k * kKeyTile;
    float piece_max = kNegInf;
#pragma GCC unroll 4
    for (int64_t h = 0; h < kHalves; ++h) {
      V wide_max = Load<V>(sr + h * kL);
      for (int64_t v = 1; v < kKeyVecs; ++v) {
        const V x = Load<V>(sr + v * kLanes + h * kL);
        wide_max = wide_max > x ? wide_max : x;
      }
      piece_max = std::max(piece_max, MaxOfLanes(wide_max));
    }
    float& row_max = state.row_max[r0 + k];
    const float new_max = std::max(row_max, piece_max);
    // Every visible score so far -inf: weights exp(-inf - 0) = 0, so the
    // row ends as 0 (SDPA's rule), yet 0 * an inf or NaN value is NaN.
    shift[k] = new_max == kNegInf ? 0.0f : new_max;
    old_minus_shift[k] = row_max - shift[k];
    if (begin[k] < end[k]) row_max = new_max;
  }
  alignas(64) float correction[kRowVecs * kL];
  for (int64_t v = 0; v < kRowVecs; ++v) {
    Store<V>(correction + v * kL,
             ExpNonPositive(Load<V>(old_minus_shift + v * kL)));
  }
  for (int64_t k = 0; k < kRows; ++k) {
    if (begin[k] >= end[k]) continue;
    float* sr = s + k * kKeyTile;
    float* sum = reinterpret_cast<float*>(&state.row_sum[r0 + k]);
#pragma GCC unroll 4
    for (int64_t h = 0; h < kHalves; ++h) {
      V piece_sum{};
      for (int64_t v = 0; v < kKeyVecs; ++v) {
        float* x = sr + v * kLanes + h * kL;
        const V e = ExpNonPositive(Load<V>(x) - shift[k]);
        Store<V>(x, e);
        piece_sum = v == 0 ? e : piece_sum + e;
      }
      Store<V>(sum + h * kL, Load<V>(sum + h * kL) * correction[k] + piece_sum);
    }
  }
  float* acc = state.acc + r0 * d_size;
  const int64_t vs_stride = ValueStride(d_size);
  if (shared_begin >= shared_end) {
    for (int64_t k = 0; k < kRows; ++k) {
      if (begin[k] >= end[k]) continue;
      AccumulateValues<V>(acc + k * d_size, d_size, correction[k],
                          s + k * kKeyTile + begin[k],
                          vs + begin[k] * vs_stride, end[k] - begin[k]);
    }
    return;
  }
  // Each row's keys in order: its own keys before the shared ones (row by
  // row), the shared ones (rows together), its own keys after them. The
  // correction scales the accumulator once, in the first part the row has;
  // the later parts scale by 1, which changes no bit.
  float factor[kRows];
  for (int64_t k = 0; k < kRows; ++k) {
    factor[k] = correction[k];
    if (begin[k] == shared_begin) continue;
    AccumulateValues<V>(acc + k * d_size, d_size, correction[k],
                        s + k * kKeyTile + begin[k], vs + begin[k] * vs_stride,
                        shared_begin - begin[k]);
    factor[k] = 1.0f;
  }
  for (int64_t k = 0; k < kRows; k += kValueRows) {
    AccumulateValueRows<kValueRows, V>(
        acc + k * d_size, d_size, factor + k, s + k * kKeyTile + shared_begin,
        vs + shared_begin * vs_stride, shared_end - shared_begin);
  }
  for (int64_t k = 0; k < kRows; ++k) {
    if (end[k] == shared_end) continue;
    AccumulateValues<V>(acc + k * d_size, d_size, 1.0f,
                        s + k * kKeyTile + shared_end,
                        vs + shared_end * vs_stride, end[k] - shared_end);
  }
}

// FlashAttention-style tile: stage the tile's queries as float, stream the
// visible keys/values in kKeyTile pieces (K staged transposed, so a score
// row is a plain vector loop over keys, V as float rows, each converted
// once per tile), and keep a running max, sum and float32 accumulator per
// query row. Rows go through AttendRows kRows at a time (then 4, 2, 1 for
// the rest). Every sum runs in a fixed order independent of the vector
// width and of kRows / kValueRows, and the build never contracts
// multiply-adds, so all ISA variants give the same bits.
template <int64_t kRows, int64_t kValueRows, typename V, typename T>
POLYOPS_INLINE void AttendTile(const AttentionArgs<T>& a,
                               const AttentionSequence& seq,
                               const AttentionTile& tile) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t d_size = a.head_size;
  const int64_t vs_stride = ValueStride(d_size);
  const int64_t rows = tile.tokens * tile.heads;
  const int64_t kv_head = tile.head_begin / a.group;
  alignas(64) float qs[kTileFloats];
  alignas(64) float acc[kTileFloats];
  alignas(64) float kt[kMaxTileHead * kKeyTile];
  alignas(64) float vs[kKeyTile * ValueStride(kMaxTileHead)];
  alignas(64) float s[kRows * kKeyTile];
  alignas(64) Float16v row_sum[kMaxTileRows];
  float row_max[kMaxTileRows];
  const TileState state{row_max, row_sum, acc};

  for (int64_t t = 0; t < tile.tokens; ++t) {
    const int64_t token = seq.q_start + tile.token_begin + t;
    for (int64_t h = 0; h < tile.heads; ++h) {
      const int64_t r = t * tile.heads + h;
      LoadBlock(a.query + token * a.q_stride_token +
                    (tile.head_begin + h) * a.q_stride_head,
                1, qs + r * d_size, d_size);
      row_max[r] = kNegInf;
      row_sum[r] = Float16v{};
    }
  }
  std::fill(acc, acc + rows * d_size, 0.0f);

  const int64_t first = tile.token_begin;
  const int64_t last = tile.token_begin + tile.tokens - 1;
  const KeyRange first_range = VisibleKeys(
      first, seq.q_len, seq.kv_len, a.causal, a.window_left, a.window_right);
  const KeyRange last_range = VisibleKeys(last, seq.q_len, seq.kv_len, a.causal,
                                          a.window_left, a.window_right);
  // Keys outside [first_range.lo, last_range.hi] are masked for every row
  // of the tile, so those kv tiles are never loaded.
  for (int64_t c0 = first_range.lo; c0 <= last_range.hi; c0 += kKeyTile) {
    const int64_t n = std::min(kKeyTile, last_range.hi - c0 + 1);
    // float16 keys are staged as float first (widening them in the
    // vector takes F16C, which the baseline variant lacks).
    using KeyRow = std::conditional_t<std::is_same_v<T, Half>, float, T>;
    const KeyRow* k_rows[kKeyTile];
    for (int64_t c = 0; c < n; ++c) {
      const T* k_row =
          KvRow(a.key, a.k_stride_block, a.k_stride_token, a.k_stride_head, seq,
                a.block_size, c0 + c, kv_head);
      if constexpr (std::is_same_v<T, Half>) {
        k_rows[c] = StageIn(k_row, vs + c * vs_stride, d_size);
      } else {
        k_rows[c] = k_row;
      }
    }
    TransposeKeys<V>(k_rows, n, d_size, kt);
    for (int64_t c = 0; c < n; ++c) {
      const T* v_row =
          KvRow(a.value, a.v_stride_block, a.v_stride_token, a.v_stride_head,
                seq, a.block_size, c0 + c, kv_head);
      LoadBlock(v_row, 1, vs + c * vs_stride, d_size);
    }
    // Rows whose visible range covers the whole piece need no mask.
    const bool unmasked =
        n == kKeyTile && c0 >= last_range.lo && c0 + n - 1 <= first_range.hi;
    // The next piece's key/value rows are scattered (a token stride or a
    // block apart), which the hardware prefetchers do not follow: fetch
    // them while this piece computes, a few rows per row group.
    const int64_t next = c0 + kKeyTile;
    const int64_t next_end = std::min(next + kKeyTile, last_range.hi + 1);
    const int64_t groups = std::max<int64_t>(1, rows / kRows);
    const int64_t step =
        std::max<int64_t>(1, (next_end - next + groups - 1) / groups);
    int64_t prefetched = next;
    int64_t r0 = 0;
    for (; r0 + kRows <= rows; r0 += kRows) {
      AttendRows<kRows, kValueRows, V>(a, seq, tile, r0, c0, n, unmasked, qs,
                                       kt, vs, s, state);
      const int64_t until = std::min(prefetched + step, next_end);
      PrefetchKvRows(a, seq, kv_head, prefetched, until);
      prefetched = until;
    }
    PrefetchKvRows(a, seq, kv_head, prefetched, next_end);
    if constexpr (kRows > 4) {
      if (r0 + 4 <= rows) {
        AttendRows<4, std::min<int64_t>(4, kValueRows), V>(
            a, seq, tile, r0, c0, n, unmasked, qs, kt, vs, s, state);
        r0 += 4;
      }
    }
    if constexpr (kRows > 2) {
      if (r0 + 2 <= rows) {
        AttendRows<2, std::min<int64_t>(2, kValueRows), V>(
            a, seq, tile, r0, c0, n, unmasked, qs, kt, vs, s, state);
        r0 += 2;
      }
    }
    if (r0 < rows) {
      AttendRows<1, 1, V>(a, seq, tile, r0, c0, n, unmasked, qs, kt, vs, s,
                          state);
    }
  }

  for (int64_t t = 0; t < tile.tokens; ++t) {
    const int64_t token = seq.q_start + tile.token_begin + t;
    for (int64_t h = 0; h < tile.heads; ++h) {
      const int64_t r = t * tile.heads + h;
      float* o = acc + r * d_size;
      // Sum 0: no key visible, or all visible scores -inf; the row is 0
      // (NaN where 0 * inf reached the accumulator). A NaN sum stays NaN.
      const float sum = SumOfLanes(row_sum[r]);
      const float inverse = sum == 0.0f ? 0.0f : 1.0f / sum;
      // One NaN in every variant: a NaN's sign follows the operand order
      // the compiler picks for a commutative operation, which differs
      // between the variants' vector widths
      // (tests/cpu/test_cpu_wide_vectors.py).
      for (int64_t d = 0; d < d_size; ++d) {
        const float v = o[d] * inverse;
        o[d] = v == v ? v : std::numeric_limits<float>::quiet_NaN();
      }
      StoreBlock(o,
                 a.out + token * a.o_stride_token +
                     (tile.head_begin + h) * a.o_stride_head,
                 1, d_size);
    }
  }
}

}  // namespace polyops::cpu

#endif  // POLYOPS_CPU_KERNELS_ATTENTION_ATTENTION_TILES_H_
