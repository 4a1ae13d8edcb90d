// Shared pieces of the CPU attention kernels (flash_attention,
// paged_attention), the header their slots include: the ISA variant of the
// tile kernel, the split of a call into tiles and their schedule. The
// sequence metadata, vector primitives and tile kernel it builds on are in
// attention_sequences.h, attention_vectors.h and attention_tiles.h.
#ifndef POLYOPS_CPU_KERNELS_ATTENTION_ATTENTION_H_
#define POLYOPS_CPU_KERNELS_ATTENTION_ATTENTION_H_

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <vector>

#include "cpu/kernels/attention/attention_sequences.h"
#include "cpu/kernels/attention/attention_tiles.h"
#include "cpu/kernels/attention/attention_vectors.h"
#include "cpu/runtime/convert.h"
#include "cpu/runtime/isa.h"

namespace polyops::cpu {

// Rows per AttendRows group and per value block of each ISA variant, with
// its vector (see kAccumulatorsOf): AVX-512 4 rows x 4 zmm (64 keys or dims)
// = 16 accumulators, a broadcast per 4 multiplies; AVX2 6 rows x 2 ymm (16
// keys or dims) = 12, two loads per 6 broadcasts and 12 multiply-adds
// (measured faster in-cache than 4 x 2 or 2 x 4); SSE2 4 rows x 2 xmm = 8
// (its two-operand multiply needs a copy of the broadcast). They change only
// which rows share a load, never an element's arithmetic, so the variants
// agree bit for bit.
inline constexpr int64_t kAvx2Rows = 6;
inline constexpr int64_t kBaseRows = 4;

template <int64_t kRows, int64_t kValueRows, typename V, typename T>
POLYOPS_INLINE void AttendTiles(const AttentionArgs<T>& a,
                                const AttentionSequence* sequences,
                                const AttentionTile* tiles, int64_t count) {
  for (int64_t k = 0; k < count; ++k) {
    AttendTile<kRows, kValueRows, V>(a, sequences[tiles[k].sequence], tiles[k]);
  }
}

template <typename T>
void AttendTilesBase(const AttentionArgs<T>& a,
                     const AttentionSequence* sequences,
                     const AttentionTile* tiles, int64_t count) {
  AttendTiles<kBaseRows, kBaseRows, Float4v>(a, sequences, tiles, count);
}

template <typename T>
POLYOPS_TARGET_AVX2 void AttendTilesAvx2(const AttentionArgs<T>& a,
                                         const AttentionSequence* sequences,
                                         const AttentionTile* tiles,
                                         int64_t count) {
  AttendTiles<kAvx2Rows, kAvx2Rows, Float8v>(a, sequences, tiles, count);
}

template <typename T>
POLYOPS_TARGET_AVX512 void AttendTilesAvx512(const AttentionArgs<T>& a,
                                             const AttentionSequence* sequences,
                                             const AttentionTile* tiles,
                                             int64_t count) {
  AttendTiles<4, 4, Float16v>(a, sequences, tiles, count);
}

template <typename T>
auto AttendTilesForCpu() {
  return PickIsa(&AttendTilesBase<T>, &AttendTilesAvx2<T>,
                 &AttendTilesAvx512<T>);
}

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

// Multiply-adds of a tile, about: its rows times the keys from the first
// row's first visible key to the last row's last one.
template <typename T>
int64_t TileCost(const AttentionArgs<T>& a, const AttentionSequence& seq,
                 const AttentionTile& tile) {
  const KeyRange first = VisibleKeys(tile.token_begin, seq.q_len, seq.kv_len,
                                     a.causal, a.window_left, a.window_right);
  const KeyRange last =
      VisibleKeys(tile.token_begin + tile.tokens - 1, seq.q_len, seq.kv_len,
                  a.causal, a.window_left, a.window_right);
  return tile.tokens * tile.heads *
         std::max<int64_t>(1, last.hi - first.lo + 1);
}

// Runs the tiles, over OpenMP threads when `parallel`. Tiles differ widely
// in cost (causal rows, varlen sequences), so threads take them
// dynamically: (sequence, kv head) by (sequence, kv head) as AppendTiles
// made them, so tiles taken one after another read the same keys and
// values while they are still cached, and within each the costliest first,
// so the schedule ends with short tiles and no thread waits long for
// another. The serial path never enters the OpenMP runtime.
template <typename T>
void RunTiles(const AttentionArgs<T>& a,
              const std::vector<AttentionSequence>& sequences,
              const std::vector<AttentionTile>& tiles, bool parallel) {
  const auto kernel = AttendTilesForCpu<T>();
  const int64_t count = static_cast<int64_t>(tiles.size());
  if (parallel && count > 1) {
    struct Order {
      int64_t sequence, kv_head, minus_cost, tile;
      bool operator<(const Order& o) const {
        return std::tie(sequence, kv_head, minus_cost, tile) <
               std::tie(o.sequence, o.kv_head, o.minus_cost, o.tile);
      }
    };
    std::vector<Order> order(count);
    for (int64_t k = 0; k < count; ++k) {
      const AttentionTile& tile = tiles[k];
      order[k] = {tile.sequence, tile.head_begin / a.group,
                  -TileCost(a, sequences[tile.sequence], tile), k};
    }
    std::sort(order.begin(), order.end());
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t k = 0; k < count; ++k) {
      kernel(a, sequences.data(), tiles.data() + order[k].tile, 1);
    }
  } else {
    kernel(a, sequences.data(), tiles.data(), count);
  }
}

// Work (multiply-adds) from which the kernels go parallel.
inline constexpr int64_t kAttentionParallelWork = int64_t{1} << 18;

}  // namespace polyops::cpu

#endif  // POLYOPS_CPU_KERNELS_ATTENTION_ATTENTION_H_
