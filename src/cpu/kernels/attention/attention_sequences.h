// The sequence metadata of a CPU attention call: reading and checking the
// lengths and block ids, and which keys each query sees. Host-side
// bookkeeping, apart from the tile arithmetic that consumes it.
#ifndef POLYOPS_CPU_KERNELS_ATTENTION_ATTENTION_SEQUENCES_H_
#define POLYOPS_CPU_KERNELS_ATTENTION_ATTENTION_SEQUENCES_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "base/flash_attention.h"
#include "core/error.h"
#include "core/tensor.h"
#include "cpu/runtime/parallel.h"

namespace polyops::cpu {

// One sequence of a batch, as the kernels see it after validation.
struct AttentionSequence {
  int64_t q_start = 0;   // first query row (token index into query / out)
  int64_t q_len = 0;     // query rows
  int64_t kv_start = 0;  // first kv row (contiguous kv only)
  int64_t kv_len = 0;    // keys it attends over
  const int64_t* blocks = nullptr;  // its block table row (paged kv only)
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
  std::vector<int64_t> blocks;
};

// Entry `at` (in elements) of an int32 or int64 index tensor in host memory
// (lengths, offsets, block ids), read once (ReadOnce) and widened.
inline int64_t ReadIndex(const Tensor& tensor, int64_t at) {
  return tensor.dtype() == DataType::kInt64
             ? ReadOnce(tensor.data_as<int64_t>() + at)
             : ReadOnce(tensor.data_as<int32_t>() + at);
}

// Appends the block ids sequence b (kv_len tokens) uses from row b of
// `table` to read->blocks, each read once and checked (data, so checked at
// call time), after checking that kv_len fits the row.
inline void CopyBlocks(const char* op, const char* table_name,
                       const Tensor& table, int64_t b, int64_t kv_len,
                       int64_t max_blocks, int64_t block_size,
                       int64_t num_blocks, SequenceTable* read) {
  POLYOPS_CHECK(kv_len <= max_blocks * block_size, "polyops.", op,
                ": sequence ", b, " has ", kv_len, " kv tokens, more than its ",
                table_name, " row holds (", max_blocks, " blocks of ",
                block_size, ")");
  const int64_t used = (kv_len + block_size - 1) / block_size;
  for (int64_t k = 0; k < used; ++k) {
    const int64_t block = ReadIndex(table, b * table.stride(0) + k);
    POLYOPS_CHECK(block >= 0 && block < num_blocks, "polyops.", op, ": ",
                  table_name, "[", b, "][", k, "] = ", block,
                  " is not a block of the cache (must be in [0, ", num_blocks,
                  "))");
    read->blocks.push_back(block);
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

// Reads flash_attention's cu_seqlens (copies read once each, checked) and
// block table into `read`, raising InvalidArgument for malformed metadata.
// total_kv < 0 means paged kv (table non-null).
inline void ReadVarlenSequences(const int64_t* cu_q, const int64_t* cu_kv,
                                int64_t batch, int64_t total_q,
                                int64_t total_kv, const Tensor* table,
                                int64_t max_blocks, int64_t block_size,
                                int64_t num_blocks, SequenceTable* read) {
  constexpr const char* kOp = "flash_attention";
  CheckCuSeqlens(cu_q, cu_kv, batch, total_q, total_kv);
  read->sequences.resize(batch);
  for (int64_t b = 0; b < batch; ++b) {
    AttentionSequence& seq = read->sequences[b];
    seq.q_start = cu_q[b];
    seq.q_len = cu_q[b + 1] - cu_q[b];
    seq.kv_start = cu_kv[b];
    seq.kv_len = cu_kv[b + 1] - cu_kv[b];
    if (total_kv < 0) {
      CopyBlocks(kOp, "block_table", *table, b, seq.kv_len, max_blocks,
                 block_size, num_blocks, read);
    }
  }
  if (total_kv < 0) LinkBlocks(block_size, read);
}

}  // namespace polyops::cpu

#endif  // POLYOPS_CPU_KERNELS_ATTENTION_ATTENTION_SEQUENCES_H_
