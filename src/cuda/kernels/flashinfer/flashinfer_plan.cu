// The FlashInfer slots' planner and per-call plumbing
// (cuda/kernels/flashinfer/flashinfer_plan.h). Compiled only when the build has
// the FlashInfer headers (POLYOPS_WITH_FLASHINFER, cmake/flashinfer.cmake);
// includes none of them.
#ifdef POLYOPS_WITH_FLASHINFER

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cuda/kernels/flashinfer/flashinfer_plan.h"
#include "cuda/runtime/common.cuh"

namespace polyops::cuda::flashinfer {

namespace {

// Words per upload launch: the argument block stays under the classic
// 4 KiB kernel-parameter limit (the pointer and count take 12 bytes).
constexpr int kUploadWords = 1000;

struct UploadChunk {
  int32_t count;
  int32_t words[kUploadWords];
};

// Kernel arguments are copied when the launch is queued, so the plan
// reaches the device without a pinned staging buffer whose lifetime would
// have to outlast an asynchronous copy.
__global__ void UploadKernel(int32_t* dst, const UploadChunk chunk) {
  for (int i = threadIdx.x; i < chunk.count; i += blockDim.x) {
    dst[i] = chunk.words[i];
  }
}

// Block b copies sequence b's pages (kv_indptr: device, from the plan) out
// of its block-table row (int32 or int64 ids, compared at their own width)
// and flags an id outside the cache.
template <typename Id>
__global__ void GatherPagesKernel(const Id* table, int64_t stride,
                                  int64_t num_blocks, const int32_t* kv_indptr,
                                  int32_t* indices, int32_t* bad) {
  const int64_t b = blockIdx.x;
  const int32_t begin = kv_indptr[b];
  const int32_t count = kv_indptr[b + 1] - begin;
  const Id* row = table + b * stride;
  int any_bad = 0;
  for (int32_t i = threadIdx.x; i < count; i += blockDim.x) {
    const Id id = row[i];
    const bool ok = id >= 0 && id < num_blocks;
    any_bad |= ok ? 0 : 1;
    // With int64 ids num_blocks <= INT32_MAX (CheckPageIds): ok ids fit.
    indices[begin + i] = ok ? static_cast<int32_t>(id) : 0;
  }
  any_bad = __syncthreads_or(any_bad);
  if (threadIdx.x == 0) bad[b] = any_bad;
}

// NaN over the output rows of every flagged sequence (out contiguous).
__global__ void PoisonKernel(const int32_t* bad, const int32_t* q_indptr,
                             uint16_t* out, int64_t row_elems,
                             uint16_t nan_bits) {
  const int64_t b = blockIdx.x;
  if (bad[b] == 0) return;
  const int64_t end = q_indptr[b + 1] * row_elems;
  for (int64_t i = q_indptr[b] * row_elems + threadIdx.x; i < end;
       i += blockDim.x) {
    out[i] = nan_bits;
  }
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

size_t AlignUp(size_t value, size_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

// Appends `count` words (16-byte aligned, as FlashInfer's planner lays its
// arrays out) and returns their offset in words.
size_t Reserve(std::vector<int32_t>* words, size_t count) {
  const size_t offset = AlignUp(words->size(), 4);
  words->resize(offset + count, 0);
  return offset;
}

}  // namespace

const char* CompiledSet() {
  static const std::string text = [] {
    std::string s;
    auto add = [&](const char* entry) {
      if (!s.empty()) s += ", ";
      s += entry;
    };
    (void)add;
#ifdef POLYOPS_FLASHINFER_FLOAT16_64
    add("float16/64");
#endif
#ifdef POLYOPS_FLASHINFER_FLOAT16_128
    add("float16/128");
#endif
#ifdef POLYOPS_FLASHINFER_FLOAT16_256
    add("float16/256");
#endif
#ifdef POLYOPS_FLASHINFER_BFLOAT16_64
    add("bfloat16/64");
#endif
#ifdef POLYOPS_FLASHINFER_BFLOAT16_128
    add("bfloat16/128");
#endif
#ifdef POLYOPS_FLASHINFER_BFLOAT16_256
    add("bfloat16/256");
#endif
    return s.empty() ? std::string("none") : s;
  }();
  return text.c_str();
}

Plan MakePlan(const PlanInput& in, int num_sms) {
  Plan plan;
  const int batch = in.batch;
  const int64_t group = in.num_qo_heads / in.num_kv_heads;
  const bool paged = in.page_size > 0;
  const int64_t page = paged ? in.page_size : 1;
  std::vector<int64_t> qo_len(batch), kv_len(batch), units(batch), tiles(batch),
      chunks(batch, 1);
  int64_t packed_sum = 0;
  int64_t max_units = 1;
  bool empty_rows = false;  // rows that see no key (merged as NaN if split)
  for (int b = 0; b < batch; ++b) {
    qo_len[b] = in.q_indptr[b + 1] - in.q_indptr[b];
    kv_len[b] = in.kv_indptr != nullptr ? in.kv_indptr[b + 1] - in.kv_indptr[b]
                                        : in.kv_lens[b];
    units[b] = paged ? CeilDiv(kv_len[b], page) : kv_len[b];
    packed_sum += qo_len[b] * group;
    max_units = std::max(max_units, units[b]);
    empty_rows = empty_rows || (qo_len[b] > 0 && kv_len[b] == 0) ||
                 (in.causal && qo_len[b] > kv_len[b]);
  }
  const int64_t average = batch > 0 ? packed_sum / batch : 0;
  plan.cta_tile_q = average > kSmallTile ? LargeTile(in.head_dim) : kSmallTile;
  for (int b = 0; b < batch; ++b) {
    tiles[b] = CeilDiv(qo_len[b] * group, plan.cta_tile_q);
  }

  // Split kv into chunks only when whole sequences per CTA would leave SMs
  // idle (two CTAs per SM, as FlashInfer assumes): the smallest chunk (>= 128
  // tokens) whose CTA count still fits one wave. Not with a left window (the
  // kernel then starts each row's range late) nor with rows that see no key
  // (their empty partial states would merge to NaN instead of 0).
  int64_t chunk = max_units;
  const int64_t max_ctas = 2 * static_cast<int64_t>(num_sms) / in.num_kv_heads;
  if (in.window_left < 0 && !empty_rows && max_ctas > 0) {
    int64_t low = std::max<int64_t>(128 / page, 1);
    int64_t high = max_units;
    while (low < high) {
      const int64_t mid = (low + high) / 2;
      int64_t ctas = 0;
      for (int b = 0; b < batch; ++b) {
        ctas += tiles[b] * CeilDiv(std::max<int64_t>(units[b], 1), mid);
      }
      if (ctas > max_ctas) {
        low = mid + 1;
      } else {
        high = mid;
      }
    }
    if (low < max_units) {
      plan.split_kv = true;
      chunk = low;
    }
  }

  std::vector<int32_t>& words = plan.words;
  plan.q_indptr = Reserve(&words, batch + 1);
  plan.kv_indptr = Reserve(&words, batch + 1);
  plan.o_indptr = Reserve(&words, batch + 1);
  plan.kv_chunk_size = Reserve(&words, 1);
  if (paged) plan.last_page_len = Reserve(&words, batch);
  int64_t items = 0;
  int64_t pages = 0;
  int64_t o_rows = 0;
  for (int b = 0; b < batch; ++b) {
    if (plan.split_kv) {
      chunks[b] = CeilDiv(std::max<int64_t>(units[b], 1), chunk);
    }
    items += tiles[b] * chunks[b];
    words[plan.q_indptr + b] = in.q_indptr[b];
    if (paged) {
      words[plan.kv_indptr + b] = static_cast<int32_t>(pages);
      pages += units[b];
      words[plan.last_page_len + b] =
          kv_len[b] == 0
              ? 0
              : static_cast<int32_t>(kv_len[b] - (units[b] - 1) * page);
    } else {
      words[plan.kv_indptr + b] = in.kv_indptr[b];
    }
    words[plan.o_indptr + b] = static_cast<int32_t>(o_rows);
    o_rows += qo_len[b] * chunks[b];
  }
  words[plan.q_indptr + batch] = in.q_indptr[batch];
  words[plan.kv_indptr + batch] =
      paged ? static_cast<int32_t>(pages) : in.kv_indptr[batch];
  words[plan.o_indptr + batch] = static_cast<int32_t>(o_rows);
  words[plan.kv_chunk_size] = static_cast<int32_t>(
      std::min<int64_t>(chunk * page, std::numeric_limits<int32_t>::max()));
  plan.num_pages = static_cast<size_t>(pages);

  plan.request_indices = Reserve(&words, items);
  plan.qo_tile_indices = Reserve(&words, items);
  plan.kv_tile_indices = Reserve(&words, items);
  int64_t item = 0;
  for (int b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < tiles[b]; ++t) {
      for (int64_t c = 0; c < chunks[b]; ++c, ++item) {
        words[plan.request_indices + item] = b;
        words[plan.qo_tile_indices + item] = static_cast<int32_t>(t);
        words[plan.kv_tile_indices + item] = static_cast<int32_t>(c);
      }
    }
  }
  plan.padded_batch_size = static_cast<uint32_t>(items);
  plan.total_rows = static_cast<uint32_t>(in.q_indptr[batch]);
  if (plan.split_kv) {
    // Row r's partial states are merge_indptr[r] .. merge_indptr[r+1]-1 of
    // the temporary output (rows of a sequence times its chunks).
    plan.merge_indptr = Reserve(&words, plan.total_rows + 1);
    int64_t state = 0;
    int64_t row = 0;
    for (int b = 0; b < batch; ++b) {
      for (int64_t i = 0; i < qo_len[b]; ++i) {
        words[plan.merge_indptr + row++] = static_cast<int32_t>(state);
        state += chunks[b];
      }
    }
    words[plan.merge_indptr + row] = static_cast<int32_t>(state);
    plan.tmp_v_bytes = static_cast<size_t>(o_rows) * in.num_qo_heads *
                       in.head_dim * in.out_elem_bytes;
    plan.tmp_s_bytes = static_cast<size_t>(o_rows) * in.num_qo_heads * 4;
  }
  return plan;
}

void Execute(const Handle& handle, const Plan& plan, LaunchArgs args,
             const PagedTable* paged, Launcher small, Launcher large,
             uint16_t nan_bits, const char* op) {
  if (plan.padded_batch_size == 0) return;  // no query rows at all
  constexpr size_t kAlign = 256;
  const size_t words_bytes = AlignUp(plan.words.size() * 4, kAlign);
  const size_t pages_bytes =
      paged != nullptr ? AlignUp((plan.num_pages + args.batch) * 4, kAlign) : 0;
  const size_t tmp_v_bytes = AlignUp(plan.tmp_v_bytes, kAlign);
  const size_t total =
      words_bytes + pages_bytes + tmp_v_bytes + plan.tmp_s_bytes;
  Workspace scratch(handle, total, op);
  auto* base = static_cast<unsigned char*>(scratch.data());
  auto* words = reinterpret_cast<int32_t*>(base);
  cudaStream_t stream = StreamOf(handle);

  UploadChunk chunk;
  for (size_t offset = 0; offset < plan.words.size(); offset += kUploadWords) {
    chunk.count = static_cast<int32_t>(
        std::min<size_t>(kUploadWords, plan.words.size() - offset));
    std::memcpy(chunk.words, plan.words.data() + offset, chunk.count * 4);
    UploadKernel<<<1, 256, 0, stream>>>(words + offset, chunk);
  }
  CheckLaunch(op);

  args.q_indptr = words + plan.q_indptr;
  args.kv_indptr = words + plan.kv_indptr;
  args.o_indptr = words + plan.o_indptr;
  args.kv_chunk_size = words + plan.kv_chunk_size;
  args.request_indices = words + plan.request_indices;
  args.qo_tile_indices = words + plan.qo_tile_indices;
  args.kv_tile_indices = words + plan.kv_tile_indices;
  args.merge_indptr = plan.split_kv ? words + plan.merge_indptr : nullptr;
  args.padded_batch_size = plan.padded_batch_size;
  args.total_rows = plan.total_rows;
  if (plan.split_kv) {
    args.tmp_v = base + words_bytes + pages_bytes;
    args.tmp_s = reinterpret_cast<float*>(base + words_bytes + pages_bytes +
                                          tmp_v_bytes);
  }
  int32_t* bad = nullptr;
  if (paged != nullptr) {
    args.last_page_len = words + plan.last_page_len;
    args.kv_indices = reinterpret_cast<int32_t*>(base + words_bytes);
    bad = args.kv_indices + plan.num_pages;
    if (paged->wide) {
      GatherPagesKernel<<<args.batch, 128, 0, stream>>>(
          static_cast<const int64_t*>(paged->table), paged->stride,
          paged->num_blocks, args.kv_indptr, args.kv_indices, bad);
    } else {
      GatherPagesKernel<<<args.batch, 128, 0, stream>>>(
          static_cast<const int32_t*>(paged->table), paged->stride,
          paged->num_blocks, args.kv_indptr, args.kv_indices, bad);
    }
    CheckLaunch(op);
  }
  (plan.cta_tile_q == kSmallTile ? small : large)(args, stream, op);
  if (paged != nullptr) {
    PoisonKernel<<<args.batch, 256, 0, stream>>>(
        bad, args.q_indptr, static_cast<uint16_t*>(args.o),
        static_cast<int64_t>(args.num_qo_heads) * args.head_dim, nan_bits);
    CheckLaunch(op);
  }
}

int MultiprocessorCount(const char* op) {
  int device = 0;
  int count = 0;
  Check(cudaGetDevice(&device), op, "cudaGetDevice");
  Check(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device),
        op, "cudaDeviceGetAttribute");
  return count;
}

}  // namespace polyops::cuda::flashinfer

#endif  // POLYOPS_WITH_FLASHINFER
