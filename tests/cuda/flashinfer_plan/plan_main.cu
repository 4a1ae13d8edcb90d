// Property check of the FlashInfer slots' host planner (MakePlan,
// src/cuda/kernels/flashinfer/flashinfer_plan.cu) on random batches: every query tile and kv
// chunk of every sequence is scheduled exactly once, the uploaded indptrs
// reproduce the host lengths (pages and last-page lengths for paged kv), the
// merge and output indptrs agree, and kv is never split with a left window or
// with rows that see no key. Host code only: built with nvcc (the planner's
// file also holds its kernels) and run on a machine without a GPU by
// tests/cuda/test_flashinfer_plan.py. Exit status 0 when every check holds.
#include <cstdio>
#include <random>
#include <vector>

#include "cuda/kernels/flashinfer/flashinfer_plan.h"
using namespace polyops::cuda::flashinfer;
int main() {
  constexpr int kDims[3] = {64, 128, 256};
  std::mt19937 rng(1);
  int failures = 0, splits = 0, cases = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    int batch = 1 + rng() % 6;
    int hkv = 1 + rng() % 4, group = 1 + rng() % 8, dim = kDims[rng() % 3];
    bool paged = rng() % 2, causal = rng() % 2;
    int page = paged ? 1 + rng() % 20 : 0;
    int wl = rng() % 4 == 0 ? int(rng() % 50) : -1;
    std::vector<int32_t> q(batch + 1, 0), kv(batch + 1, 0), lens(batch);
    for (int b = 0; b < batch; ++b) {
      int ql = rng() % 3 == 0 ? 1 : rng() % 300;
      int kl = rng() % 5 == 0 ? int(rng() % 5) : int(rng() % 5000);
      if (rng() % 2) kl = std::max(kl, ql);
      q[b + 1] = q[b] + ql;
      kv[b + 1] = kv[b] + kl;
      lens[b] = kl;
    }
    PlanInput in;
    in.batch = batch;
    in.q_indptr = q.data();
    in.kv_indptr = kv.data();
    in.num_qo_heads = hkv * group;
    in.num_kv_heads = hkv;
    in.head_dim = dim;
    in.page_size = page;
    in.window_left = wl;
    in.causal = causal;
    int sms = 132;
    Plan p = MakePlan(in, sms);
    ++cases;
    splits += p.split_kv;
    const int32_t* w = p.words.data();
    auto fail = [&](const char* what) {
      if (failures++ < 10) printf("FAIL %s trial %d\n", what, trial);
    };
    // Coverage: each request's packed rows covered by tiles, each chunk once.
    int cta = p.cta_tile_q;
    int chunk_tokens = w[p.kv_chunk_size];
    std::vector<std::vector<int>> seen(batch);
    for (uint32_t i = 0; i < p.padded_batch_size; ++i) {
      int b = w[p.request_indices + i], t = w[p.qo_tile_indices + i],
          c = w[p.kv_tile_indices + i];
      if (b < 0 || b >= batch) {
        fail("request");
        continue;
      }
      int packed = (q[b + 1] - q[b]) * group;
      if (t * cta >= packed) fail("tile beyond rows");
      int chunks =
          p.split_kv ? std::max(1, (lens[b] + chunk_tokens - 1) / chunk_tokens)
                     : 1;
      if (c >= chunks) fail("chunk beyond");
      seen[b].push_back(t * 1000 + c);
    }
    for (int b = 0; b < batch; ++b) {
      int packed = (q[b + 1] - q[b]) * group;
      int tiles = (packed + cta - 1) / cta;
      int chunks =
          p.split_kv ? std::max(1, (lens[b] + chunk_tokens - 1) / chunk_tokens)
                     : 1;
      if ((int)seen[b].size() != tiles * chunks) fail("coverage count");
      if (w[p.q_indptr + b] != q[b]) fail("q_indptr");
      if (paged) {
        int pages = w[p.kv_indptr + b + 1] - w[p.kv_indptr + b];
        int len = pages == 0 ? 0 : (pages - 1) * page + w[p.last_page_len + b];
        if (len != lens[b]) fail("paged length");
      } else if (w[p.kv_indptr + b] != kv[b])
        fail("kv_indptr");
    }
    // o_indptr / merge_indptr agree.
    bool empty_rows = false;
    for (int b = 0; b < batch; ++b) {
      const int ql = q[b + 1] - q[b];
      empty_rows =
          empty_rows || (ql > 0 && lens[b] == 0) || (causal && ql > lens[b]);
    }
    if (p.split_kv) {
      if (wl >= 0) fail("split with window");
      if (empty_rows) fail("split with rows that see no key");
      int row = 0;
      for (int b = 0; b < batch; ++b) {
        int chunks = std::max(1, (lens[b] + chunk_tokens - 1) / chunk_tokens);
        for (int i = 0; i < q[b + 1] - q[b]; ++i, ++row) {
          if (w[p.merge_indptr + row] != w[p.o_indptr + b] + i * chunks)
            fail("merge_indptr");
        }
      }
      if (w[p.merge_indptr + row] != w[p.o_indptr + batch]) fail("merge end");
      size_t want = size_t(w[p.o_indptr + batch]) * hkv * group * dim * 2;
      if (p.tmp_v_bytes != want) fail("tmp_v");
    } else {
      for (int b = 0; b <= batch; ++b)
        if (w[p.o_indptr + b] != q[b]) fail("o_indptr");
    }
  }
  printf("cases %d splits %d failures %d\n", cases, splits, failures);
  return failures != 0;
}
