// Shared pieces of the CPU attention kernels (flash_attention,
// paged_attention): the mask, the validation of the sequence metadata the
// kernels read, and a blocked online-softmax tile kernel.
#ifndef POLYOPS_CPU_ATTENTION_H_
#define POLYOPS_CPU_ATTENTION_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "base/flash_attention.h"
#include "core/error.h"
#include "cpu/convert.h"
#include "cpu/parallel.h"
#include "cpu/row_kernels.h"

namespace polyops::cpu {

// One sequence of a batch, as the kernels see it after validation.
struct AttentionSequence {
  int64_t q_start = 0;   // first query row (token index into query / out)
  int64_t q_len = 0;     // query rows
  int64_t kv_start = 0;  // first kv row (contiguous kv only)
  int64_t kv_len = 0;    // keys it attends over
  const int32_t* blocks = nullptr;  // its block table row (paged kv only)
};

// Keys [lo, hi] (inclusive, empty when lo > hi) that query i of a sequence
// sees: causal aligned to the end of the kv sequence, then the window. Both
// ends are non-decreasing in i, which the tile kernel relies on.
struct KeyRange {
  int64_t lo;
  int64_t hi;
};

inline KeyRange VisibleKeys(int64_t i, int64_t q_len, int64_t kv_len,
                            bool causal, int64_t window_left,
                            int64_t window_right) {
  const int64_t pos = i + kv_len - q_len;
  int64_t lo = 0;
  int64_t hi = kv_len - 1;
  if (causal) hi = std::min(hi, pos);
  if (window_right >= 0) hi = std::min(hi, pos + window_right);
  if (window_left >= 0) lo = std::max(lo, pos - window_left);
  return {lo, hi};
}

// A call's sequences as the kernels use them. The lengths and block ids are
// caller memory another thread may change while the call runs without the
// GIL, so each is read once (ReadOnce) into here, checked here, and the
// kernels read only these copies: a checked block id cannot turn into an
// out-of-bounds access.
struct SequenceTable {
  std::vector<AttentionSequence> sequences;
  // The block ids each paged sequence uses, back to back; sequences[b].blocks
  // points into it (LinkBlocks).
  std::vector<int32_t> blocks;
};

// Appends the block ids sequence b (kv_len tokens) uses from its table row
// to table->blocks, each read once and checked (data, so checked at call
// time), after checking that kv_len fits the row.
inline void CopyBlocks(const char* op, const char* table_name,
                       const int32_t* row, int64_t b, int64_t kv_len,
                       int64_t max_blocks, int64_t block_size,
                       int64_t num_blocks, SequenceTable* table) {
  POLYOPS_CHECK(kv_len <= max_blocks * block_size, "polyops.", op,
                ": sequence ", b, " has ", kv_len, " kv tokens, more than its ",
                table_name, " row holds (", max_blocks, " blocks of ",
                block_size, ")");
  const int64_t used = (kv_len + block_size - 1) / block_size;
  for (int64_t k = 0; k < used; ++k) {
    const int32_t block = ReadOnce(row + k);
    POLYOPS_CHECK(block >= 0 && block < num_blocks, "polyops.", op, ": ",
                  table_name, "[", b, "][", k, "] = ", block,
                  " is not a block of the cache (must be in [0, ", num_blocks,
                  "))");
    table->blocks.push_back(block);
  }
}

// Points each sequence at its ids in table->blocks, once all are copied
// (appending may move the vector's storage).
inline void LinkBlocks(int64_t block_size, SequenceTable* table) {
  int64_t offset = 0;
  for (AttentionSequence& seq : table->sequences) {
    seq.blocks = table->blocks.data() + offset;
    offset += (seq.kv_len + block_size - 1) / block_size;
  }
}

// Reads flash_attention's cu_seqlens (and block table) into `read`, each
// entry once, raising InvalidArgument for malformed metadata. total_kv < 0
// means paged kv (table non-null).
inline void ReadVarlenSequences(const int32_t* cu_q_data,
                                const int32_t* cu_kv_data, int64_t batch,
                                int64_t total_q, int64_t total_kv,
                                const int32_t* table, int64_t table_stride,
                                int64_t max_blocks, int64_t block_size,
                                int64_t num_blocks, SequenceTable* read) {
  constexpr const char* kOp = "flash_attention";
  std::vector<int32_t> copies(2 * (batch + 1));
  for (int64_t b = 0; b <= batch; ++b) {
    copies[b] = ReadOnce(cu_q_data + b);
    copies[batch + 1 + b] = ReadOnce(cu_kv_data + b);
  }
  const int32_t* cu_q = copies.data();
  const int32_t* cu_kv = copies.data() + batch + 1;
  CheckCuSeqlens(cu_q, cu_kv, batch, total_q, total_kv);
  read->sequences.resize(batch);
  for (int64_t b = 0; b < batch; ++b) {
    AttentionSequence& seq = read->sequences[b];
    seq.q_start = cu_q[b];
    seq.q_len = cu_q[b + 1] - cu_q[b];
    seq.kv_start = cu_kv[b];
    seq.kv_len = cu_kv[b + 1] - cu_kv[b];
    if (total_kv < 0) {
      CopyBlocks(kOp, "block_table", table + b * table_stride, b, seq.kv_len,
                 max_blocks, block_size, num_blocks, read);
    }
  }
  if (total_kv < 0) LinkBlocks(block_size, read);
}

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
// 2 * kTileFloats + 2 * kKeyTile * kMaxTileHead floats (192 KiB) per thread.
inline constexpr int64_t kKeyTile = 32;
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

// Sixteen floats as a GCC vector: locals of this type stay in registers
// (one zmm, two ymm or four xmm, whatever the variant's ISA has), which
// plain float arrays in a loop do not. Element-wise operations only, so
// every ISA variant computes the same bits.
typedef float Float16v __attribute__((vector_size(64)));
typedef int32_t Int16v __attribute__((vector_size(64)));
inline constexpr int64_t kLanes = 16;

POLYOPS_INLINE Float16v LoadV(const float* p) {
  Float16v v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

POLYOPS_INLINE void StoreV(float* p, Float16v v) {
  std::memcpy(p, &v, sizeof(v));
}

// exp(x) for x <= 0 (and -inf), 16 at a time: 2^n * p(r) with x = n ln2 +
// r, |r| <= ln2 / 2, p a degree-6 Taylor polynomial (relative error below
// 2e-7); x < -87 gives 0 and NaN stays NaN (a NaN or +inf score must turn
// its row NaN, as softmax in IEEE arithmetic does).
POLYOPS_INLINE Float16v ExpNonPositive(Float16v x) {
  const Float16v floor_value = Float16v{} - 87.0f;
  const Int16v keep = x >= floor_value;  // all ones where x >= -87
  const Float16v clamped = keep ? x : floor_value;
  // Truncating x * log2(e) - 0.5 (<= 0) rounds x * log2(e) to nearest.
  const Int16v n =
      __builtin_convertvector(clamped * 1.44269504088896341f - 0.5f, Int16v);
  const Float16v nf = __builtin_convertvector(n, Float16v);
  // ln2 in two parts: n * 0.693359375 is exact for |n| <= 127.
  const Float16v r = (clamped - nf * 0.693359375f) - nf * -2.12194440e-4f;
  Float16v p = Float16v{} + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const Int16v bits = (n + 127) << 23;
  Float16v scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  const Float16v result = p * scale;
  const Int16v nan = x != x;
  return keep ? result : nan ? x : Float16v{};
}

POLYOPS_INLINE float ExpNonPositive(float x) {
  Float16v v = Float16v{} + x;
  return ExpNonPositive(v)[0];
}

// Query rows scored together against one staged key piece: each key row
// loaded serves kScoreRows accumulators held in registers.
inline constexpr int64_t kScoreRows = 4;

// s[r * kKeyTile + c] = scale * dot(q row r, key c) for r < count (<=
// kScoreRows); kt holds the piece transposed, d_size rows of kKeyTile.
static_assert(kKeyTile == 2 * kLanes, "ScoreRows holds a piece in 2 vectors");

POLYOPS_INLINE void ScoreRows(const float* q, int64_t d_size, const float* kt,
                              int64_t count, float scale, float* s) {
  if (count == kScoreRows) {
    Float16v a0{}, b0{}, a1{}, b1{}, a2{}, b2{}, a3{}, b3{};
    for (int64_t d = 0; d < d_size; ++d) {
      const Float16v ka = LoadV(kt + d * kKeyTile);
      const Float16v kb = LoadV(kt + d * kKeyTile + kLanes);
      const float q0 = q[d], q1 = q[d_size + d], q2 = q[2 * d_size + d],
                  q3 = q[3 * d_size + d];
      a0 += q0 * ka, b0 += q0 * kb;
      a1 += q1 * ka, b1 += q1 * kb;
      a2 += q2 * ka, b2 += q2 * kb;
      a3 += q3 * ka, b3 += q3 * kb;
    }
    StoreV(s, a0 * scale), StoreV(s + kLanes, b0 * scale);
    StoreV(s + kKeyTile, a1 * scale), StoreV(s + kKeyTile + kLanes, b1 * scale);
    StoreV(s + 2 * kKeyTile, a2 * scale);
    StoreV(s + 2 * kKeyTile + kLanes, b2 * scale);
    StoreV(s + 3 * kKeyTile, a3 * scale);
    StoreV(s + 3 * kKeyTile + kLanes, b3 * scale);
    return;
  }
  for (int64_t r = 0; r < count; ++r) {
    Float16v a{}, b{};
    for (int64_t d = 0; d < d_size; ++d) {
      const float qd = q[r * d_size + d];
      a += qd * LoadV(kt + d * kKeyTile);
      b += qd * LoadV(kt + d * kKeyTile + kLanes);
    }
    StoreV(s + r * kKeyTile, a * scale);
    StoreV(s + r * kKeyTile + kLanes, b * scale);
  }
}

// o = o * correction + sum_c p[c] * v[c] over n value rows, 32 dims at a
// time held in registers across the rows (each dim sums in key order).
POLYOPS_INLINE void AccumulateValues(float* o, int64_t d_size, float correction,
                                     const float* p, const float* vs,
                                     int64_t n) {
  int64_t d0 = 0;
  for (; d0 + 2 * kLanes <= d_size; d0 += 2 * kLanes) {
    Float16v a = LoadV(o + d0) * correction;
    Float16v b = LoadV(o + d0 + kLanes) * correction;
    for (int64_t c = 0; c < n; ++c) {
      const float* v = vs + c * d_size + d0;
      a += p[c] * LoadV(v);
      b += p[c] * LoadV(v + kLanes);
    }
    StoreV(o + d0, a);
    StoreV(o + d0 + kLanes, b);
  }
  for (int64_t d = d0; d < d_size; ++d) {
    float value = o[d] * correction;
    for (int64_t c = 0; c < n; ++c) value += p[c] * vs[c * d_size + d];
    o[d] = value;
  }
}

// FlashAttention-style tile: stage the tile's queries as float, stream the
// visible keys/values in kKeyTile pieces (K staged transposed, so a score
// row is a plain vector loop over keys, V as float rows), and keep a running
// max, sum and float32 accumulator per query row. Every sum runs in a fixed
// order independent of the vector width, and the build never contracts
// multiply-adds, so all ISA variants give the same bits.
template <typename T>
POLYOPS_INLINE void AttendTile(const AttentionArgs<T>& a,
                               const AttentionSequence& seq,
                               const AttentionTile& tile) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t d_size = a.head_size;
  const int64_t rows = tile.tokens * tile.heads;
  const int64_t kv_head = tile.head_begin / a.group;
  alignas(64) float qs[kTileFloats];
  alignas(64) float acc[kTileFloats];
  alignas(64) float kt[kMaxTileHead * kKeyTile];
  alignas(64) float vs[kKeyTile * kMaxTileHead];
  alignas(64) float s[kScoreRows * kKeyTile];
  float row_max[kMaxTileRows];
  float row_sum[kMaxTileRows];

  for (int64_t t = 0; t < tile.tokens; ++t) {
    const int64_t token = seq.q_start + tile.token_begin + t;
    for (int64_t h = 0; h < tile.heads; ++h) {
      const int64_t r = t * tile.heads + h;
      LoadBlock(a.query + token * a.q_stride_token +
                    (tile.head_begin + h) * a.q_stride_head,
                1, qs + r * d_size, d_size);
      row_max[r] = kNegInf;
      row_sum[r] = 0.0f;
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
    for (int64_t c = 0; c < n; ++c) {
      const T* k_row =
          KvRow(a.key, a.k_stride_block, a.k_stride_token, a.k_stride_head, seq,
                a.block_size, c0 + c, kv_head);
      const float* k_float = StageIn(k_row, vs + c * d_size, d_size);
      for (int64_t d = 0; d < d_size; ++d) kt[d * kKeyTile + c] = k_float[d];
    }
    if (n < kKeyTile) {
      for (int64_t d = 0; d < d_size; ++d) {
        for (int64_t c = n; c < kKeyTile; ++c) kt[d * kKeyTile + c] = 0.0f;
      }
    }
    for (int64_t c = 0; c < n; ++c) {
      const T* v_row =
          KvRow(a.value, a.v_stride_block, a.v_stride_token, a.v_stride_head,
                seq, a.block_size, c0 + c, kv_head);
      LoadBlock(v_row, 1, vs + c * d_size, d_size);
    }
    // Rows whose visible range covers the whole piece need no mask.
    const bool unmasked =
        n == kKeyTile && c0 >= last_range.lo && c0 + n - 1 <= first_range.hi;
    for (int64_t r0 = 0; r0 < rows; r0 += kScoreRows) {
      const int64_t count = std::min(kScoreRows, rows - r0);
      ScoreRows(qs + r0 * d_size, d_size, kt, count, a.scale, s);
      for (int64_t r = r0; r < r0 + count; ++r) {
        float* sr = s + (r - r0) * kKeyTile;
        // The row's visible keys in this piece, [c0 + begin, c0 + end): the
        // others are left out of the value sum, not weighted by 0, so a NaN
        // or inf in a masked value (0 * inf = NaN) never reaches the row.
        int64_t begin = 0, end = n;
        if (!unmasked) {
          const KeyRange range =
              VisibleKeys(tile.token_begin + r / tile.heads, seq.q_len,
                          seq.kv_len, a.causal, a.window_left, a.window_right);
          begin = std::clamp<int64_t>(range.lo - c0, 0, n);
          end = std::clamp<int64_t>(range.hi - c0 + 1, 0, n);
          if (begin >= end) continue;
          for (int64_t c = 0; c < kKeyTile; ++c) {
            if (c < begin || c >= end) sr[c] = kNegInf;
          }
        }
        const Float16v lo = LoadV(sr), hi = LoadV(sr + kLanes);
        // NaN scores drop out of the max but not out of the exps below.
        const Float16v wide_max = lo > hi ? lo : hi;
        float piece_max = kNegInf;
        for (int64_t c = 0; c < kLanes; ++c) {
          piece_max = std::max(piece_max, wide_max[c]);
        }
        const float new_max = std::max(row_max[r], piece_max);
        // Every visible score so far -inf: weights exp(-inf - 0) = 0, so the
        // row ends as 0 (SDPA's rule), yet 0 * an inf or NaN value is NaN.
        const float shift = new_max == kNegInf ? 0.0f : new_max;
        const float correction = ExpNonPositive(row_max[r] - shift);
        StoreV(sr, ExpNonPositive(lo - shift));
        StoreV(sr + kLanes, ExpNonPositive(hi - shift));
        float piece_sum = 0.0f;
        for (int64_t c = 0; c < kKeyTile; ++c) piece_sum += sr[c];
        row_sum[r] = row_sum[r] * correction + piece_sum;
        row_max[r] = new_max;
        AccumulateValues(acc + r * d_size, d_size, correction, sr + begin,
                         vs + begin * d_size, end - begin);
      }
    }
  }

  for (int64_t t = 0; t < tile.tokens; ++t) {
    const int64_t token = seq.q_start + tile.token_begin + t;
    for (int64_t h = 0; h < tile.heads; ++h) {
      const int64_t r = t * tile.heads + h;
      float* o = acc + r * d_size;
      // Sum 0: no key visible, or all visible scores -inf; the row is 0
      // (NaN where 0 * inf reached the accumulator). A NaN sum stays NaN.
      const float inverse = row_sum[r] == 0.0f ? 0.0f : 1.0f / row_sum[r];
      for (int64_t d = 0; d < d_size; ++d) o[d] *= inverse;
      StoreBlock(o,
                 a.out + token * a.o_stride_token +
                     (tile.head_begin + h) * a.o_stride_head,
                 1, d_size);
    }
  }
}

template <typename T>
POLYOPS_INLINE void AttendTiles(const AttentionArgs<T>& a,
                                const AttentionSequence* sequences,
                                const AttentionTile* tiles, int64_t count) {
  for (int64_t k = 0; k < count; ++k) {
    AttendTile(a, sequences[tiles[k].sequence], tiles[k]);
  }
}

POLYOPS_ROW_KERNEL_VARIANTS(AttendTiles,
                            (const AttentionArgs<T>& a,
                             const AttentionSequence* sequences,
                             const AttentionTile* tiles, int64_t count),
                            (a, sequences, tiles, count))

// Splits each (sequence, kv head) into tiles of at most MaxTileRows rows:
// all query heads of the kv head together where they fit, so every staged
// key/value row serves the whole group.
inline void AppendTiles(const AttentionSequence& seq, int64_t sequence,
                        int64_t num_kv_heads, int64_t group, int64_t head_size,
                        std::vector<AttentionTile>* tiles) {
  const int64_t max_rows = MaxTileRows(head_size);
  const int64_t heads = std::min(group, max_rows);
  const int64_t tokens = std::max<int64_t>(1, max_rows / heads);
  for (int64_t g = 0; g < num_kv_heads; ++g) {
    for (int64_t h0 = 0; h0 < group; h0 += heads) {
      for (int64_t t0 = 0; t0 < seq.q_len; t0 += tokens) {
        tiles->push_back({sequence, t0, std::min(tokens, seq.q_len - t0),
                          g * group + h0, std::min(heads, group - h0)});
      }
    }
  }
}

// Runs the tiles, over OpenMP threads when `parallel`. Tiles differ widely
// in cost (causal rows, varlen sequences), so threads take them
// dynamically; the serial path never enters the OpenMP runtime.
template <typename T>
void RunTiles(const AttentionArgs<T>& a,
              const std::vector<AttentionSequence>& sequences,
              const std::vector<AttentionTile>& tiles, bool parallel) {
  const auto kernel = AttendTilesForCpu<T>();
  const int64_t count = static_cast<int64_t>(tiles.size());
  if (parallel && count > 1) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t k = 0; k < count; ++k) {
      kernel(a, sequences.data(), tiles.data() + k, 1);
    }
  } else {
    kernel(a, sequences.data(), tiles.data(), count);
  }
}

// Work (multiply-adds) from which the kernels go parallel.
inline constexpr int64_t kAttentionParallelWork = int64_t{1} << 18;

}  // namespace polyops::cpu

#endif  // POLYOPS_CPU_ATTENTION_H_
