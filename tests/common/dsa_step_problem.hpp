// A random DSA decode-step problem (mla/dsa.hpp) shared by the CPU and GPU
// tests: a dense-decode problem (paged latent cache with shuffled pages and
// garbage past every request's pages, queries) plus the lightning indexer's
// side: a paged indexer key cache of its own (pages of 64 tokens, own shuffled
// block table unless the latent pages are 64 tokens and the table is shared),
// random keys appended through the public op, and quantised indexer queries.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "common/decode_problem.hpp"
#include "common/random.hpp"
#include "mla/dsa.hpp"
#include "mla/indexer.hpp"

namespace mla::testing {

struct DsaStepShape {
  DecodeShape decode;  // lengths, s_q, h_q, latent cache spec (causal is forced on)
  // Share block_table between the two caches (needs decode.cache.page_size 64).
  bool shared_table = false;
};

inline DsaStepShape dsa_step_shape(std::vector<int32_t> lengths, int64_t s_q, int64_t h_q,
                                   int64_t page_size, KvFormat fmt = KvFormat::bf16,
                                   bool shared = false) {
  DsaStepShape s;
  s.decode.lengths = std::move(lengths);
  s.decode.s_q = s_q;
  s.decode.h_q = h_q;
  s.decode.cache.format = fmt;
  s.decode.cache.page_size = page_size;
  s.shared_table = shared;
  return s;
}

struct DsaStepProblem {
  DecodeProblem dense;
  HostTensor index_cache;        // [index_pages, 8448] u8
  HostTensor index_block_table;  // [B, max_index_pages] i32 (empty when shared)
  HostTensor index_q8;           // [B, s_q, 64, 128] e4m3
  HostTensor index_w_folded;     // [B, s_q, 64] f32
  bool shared_table = false;
  int64_t max_len() const {
    int64_t m = 0;
    for (int32_t l : dense.shape.lengths) m = std::max<int64_t>(m, l);
    return m;
  }

  // Views over everything; q_in, out and lse in the caller's dtypes.
  DsaDecodeArgs args(const HostTensor& q_in, const HostTensor& out, const HostTensor& lse,
                     int64_t max_seqlen, Device dev = Device::cpu()) const {
    const DecodeArgs d = dense.args(q_in, out, lse, dev);
    DsaDecodeArgs a;
    a.q = d.q;
    a.kv = d.kv;
    a.block_table = d.block_table;
    a.cache_seqlens = d.cache_seqlens;
    a.max_seqlen = max_seqlen;
    a.index_q8 = index_q8.view(dev);
    a.index_w_folded = index_w_folded.view(dev);
    a.index_cache = IndexerCacheView{index_cache.view(dev)};
    if (!shared_table) a.index_block_table = index_block_table.view(dev);
    a.softmax_scale = d.softmax_scale;
    a.out = d.out;
    a.lse = d.lse;
    return a;
  }
};

// Indexer keys in [-3, 3] (scales 2^-7), queries in [-2, 2], weights in [-1, 1]:
// logits of both signs and no ties in practice (ties are still deterministic).
inline DsaStepProblem make_dsa_step_problem(Rng& rng, const DsaStepShape& s) {
  DsaStepProblem p;
  DecodeShape ds = s.decode;
  ds.causal = true;
  p.dense = make_decode_problem(rng, ds);
  p.shared_table = s.shared_table;
  const PagedCache& c = p.dense.cache;
  const int64_t B = p.dense.batch(), s_q = ds.s_q;
  constexpr int64_t P = IndexerCacheLayout::kPageTokens;

  // Slot of token t of request b in the indexer cache.
  std::vector<std::vector<int64_t>> slots(B);
  int64_t index_pages = 0;
  if (s.shared_table) {
    EXPECT_EQ(ds.cache.page_size, P) << "a shared block table needs latent pages of 64 tokens";
    index_pages = c.num_pages;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < ds.lengths[b]; ++t) slots[b].push_back(c.slot(b, t));
  } else {
    int64_t used = 0, widest = 0;
    for (int32_t L : ds.lengths) {
      used += (L + P - 1) / P;
      widest = std::max<int64_t>(widest, (L + P - 1) / P);
    }
    index_pages = used + 2;
    const int64_t cols = widest + 1;
    std::vector<int32_t> ids(index_pages);
    std::iota(ids.begin(), ids.end(), 0);
    rng.shuffle(ids);
    p.index_block_table = HostTensor(DType::i32, {B, cols});
    size_t next = 0;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t pages = (ds.lengths[b] + P - 1) / P;
      for (int64_t j = 0; j < cols; ++j)  // garbage past the request's pages: never read
        p.index_block_table.set(b * cols + j, j < pages ? ids[next++] : -7 - j);
      for (int64_t t = 0; t < ds.lengths[b]; ++t)
        slots[b].push_back(int64_t(p.index_block_table.get(b * cols + t / P)) * P + t % P);
    }
  }
  p.index_cache = HostTensor(DType::u8, {index_pages, IndexerCacheLayout::kPageBytes});
  p.index_cache.poison();
  int64_t T = 0;
  for (const auto& v : slots) T += static_cast<int64_t>(v.size());
  HostTensor keys = random_tensor(rng, DType::f32, {std::max<int64_t>(T, 1), kIndexerDim}, -3, 3);
  HostTensor slot_t(DType::i64, {std::max<int64_t>(T, 1)});
  slot_t.set(0, -1.0);  // T == 0: one skipped token
  int64_t i = 0;
  for (const auto& v : slots)
    for (int64_t sl : v) slot_t.set(i++, double(sl));
  Status st =
      append_indexer_keys({keys.view(), slot_t.view(), IndexerCacheView{p.index_cache.view()}});
  EXPECT_TRUE(st.ok()) << st.to_string();

  HostTensor iq = random_tensor(rng, DType::f32, {B, s_q, kIndexerHeads, kIndexerDim}, -2, 2);
  HostTensor iw = random_tensor(rng, DType::f32, {B, s_q, kIndexerHeads}, -1, 1);
  p.index_q8 = HostTensor(DType::e4m3, {B, s_q, kIndexerHeads, kIndexerDim});
  p.index_w_folded = HostTensor(DType::f32, {B, s_q, kIndexerHeads});
  st = quantize_indexer_query({iq.view(), iw.view(), p.index_q8.view(), p.index_w_folded.view()});
  EXPECT_TRUE(st.ok()) << st.to_string();
  return p;
}

}  // namespace mla::testing
