// Block-sparse selection: crafted caches where the right blocks are known (one
// head pointing at one block while the others point away: max over heads),
// tie order, the sliding window, causal prefixes, short and empty requests,
// lists that sparse_decode consumes (= dense decode when all is selected),
// presets and validation.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "common/expect_status.hpp"
#include "common/random.hpp"
#include "mla/block_sparse.hpp"
#include "mla/decode.hpp"
#include "mla/dims.hpp"
#include "mla/kv_cache.hpp"
#include "mla/sparse.hpp"

namespace mla {
namespace {

using testing::expect_error;

using testing::Rng;

// A one-request bf16 cache of `len` tokens: tiny noise everywhere, dim 0 is 0
// except on the tokens [hot_lo, hot_hi) where it is 1.
struct Crafted {
  testing::PagedCache cache;
  Crafted(int64_t len, int64_t hot_lo, int64_t hot_hi, int64_t page_size = 16) {
    Rng rng(len);
    testing::PagedCacheSpec spec;
    spec.page_size = page_size;
    cache = testing::make_paged_cache(rng, {int32_t(len)}, spec);
    std::vector<float> c(len * kDc), r(len * kDr);
    std::vector<int64_t> slots(len);
    for (int64_t t = 0; t < len; ++t) {
      for (int i = 0; i < kDc; ++i) c[t * kDc + i] = float(rng.uniform(-1e-3, 1e-3));
      for (int i = 0; i < kDr; ++i) r[t * kDr + i] = float(rng.uniform(-1e-3, 1e-3));
      c[t * kDc] = t >= hot_lo && t < hot_hi ? 1.f : 0.f;
      slots[t] = cache.slot(0, t);
    }
    const Status st = append_kv({TensorView::make(c.data(), DType::f32, {len, kDc}),
                                 TensorView::make(r.data(), DType::f32, {len, kDr}),
                                 TensorView::make(slots.data(), DType::i64, {len}), cache.view()});
    EXPECT_TRUE(st.ok()) << st.to_string();
  }
};

// Queries [1, s_q, h_q, 576]: head 0 along +dim0, the others along -dim0 (with
// weight 0.5): a sum over heads would rank the hot block last, max ranks it first.
std::vector<float> pointing_queries(int64_t s_q, int64_t h_q) {
  std::vector<float> q(s_q * h_q * kDqk, 0.f);
  for (int64_t i = 0; i < s_q; ++i)
    for (int64_t h = 0; h < h_q; ++h) q[(i * h_q + h) * kDqk] = h == 0 ? 1.f : -0.5f;
  return q;
}

struct Selection {
  std::vector<int32_t> indices, count;
  int64_t C;
};

Selection run_select(const testing::PagedCache& cache, const std::vector<float>& q, int64_t s_q,
                     int64_t h_q, const BlockSparseParams& p, Status* st = nullptr) {
  const int64_t B = cache.batch();
  Selection s;
  s.C = block_sparse_capacity(p);
  s.indices.assign(B * s_q * s.C, 12345);
  s.count.assign(B * s_q, 12345);
  BlockSparseSelectArgs a;
  a.q = TensorView::make(const_cast<float*>(q.data()), DType::f32, {B, s_q, h_q, kDqk});
  a.kv = cache.view();
  a.block_table = cache.block_table_view();
  a.cache_seqlens = cache.seqlens_view();
  a.params = p;
  a.indices = TensorView::make(s.indices.data(), DType::i32, {B, s_q, s.C});
  a.num_selected = TensorView::make(s.count.data(), DType::i32, {B, s_q});
  const Status r = block_sparse_select(a);
  if (st)
    *st = r;
  else
    EXPECT_TRUE(r.ok()) << r.to_string();
  return s;
}

// The expected list: slots of the union of the token ranges, ascending, -1 padded.
std::vector<int32_t> expected_list(const testing::PagedCache& cache,
                                   std::vector<std::pair<int64_t, int64_t>> ranges, int64_t C) {
  std::vector<bool> in(cache.seqlens[0], false);  // a union: overlapping ranges count once
  for (auto [lo, hi] : ranges)
    for (int64_t t = lo; t < hi; ++t) in[t] = true;
  std::vector<int32_t> v;
  for (int64_t t = 0; t < cache.seqlens[0]; ++t)
    if (in[t]) v.push_back(int32_t(cache.slot(0, t)));
  v.resize(C, -1);
  return v;
}

TEST(BlockSparse, PicksTheHotBlockByMaxOverHeadsThenTiesToTheLowerBlock) {
  // 1000 tokens: 16 selection blocks of 64, the last [960, 1000) clipped.
  // Hot tokens [640, 704) = block 10. Compressed blocks (32 wide, stride 16)
  // overlapping it have dim-0 means 0.5 (j = 39: [624, 656)) to 1; block 9 gets
  // 0.5 from j = 39, block 11 gets 0.5 from j = 43 ([688, 720)): a tie.
  Crafted c(1000, 640, 704);
  const int64_t h_q = 16;
  auto q = pointing_queries(1, h_q);
  BlockSparseParams p{32, 16, 64, 5, 1, 2, 0};  // 1 initial + 2 local + 2 chosen
  auto s = run_select(c.cache, q, 1, h_q, p);
  // Blocks 0, 9 (the tie goes to the lower block), 10, 14, 15.
  EXPECT_EQ(s.indices, expected_list(c.cache, {{0, 64}, {576, 704}, {896, 1000}}, s.C));
  EXPECT_EQ(s.count[0], 64 + 128 + 104);
}

TEST(BlockSparse, SlidingWindowAndNoForcedBlocks) {
  Crafted c(1000, 640, 704);
  auto q = pointing_queries(1, 16);
  BlockSparseParams p{32, 16, 64, 1, 0, 0, 100};  // the best block + the newest 100 tokens
  auto s = run_select(c.cache, q, 1, 16, p);
  EXPECT_EQ(s.indices, expected_list(c.cache, {{640, 704}, {900, 1000}}, s.C));
  EXPECT_EQ(s.C, 192);  // 64 + 100 rounded up to a multiple of 64
}

TEST(BlockSparse, CausalPrefixesPerNewToken) {
  // 3 new tokens; token i sees 130 - (2 - i) keys. Hot block 1 = [64, 128).
  Crafted c(130, 64, 128);
  auto q = pointing_queries(3, 16);
  BlockSparseParams p{32, 16, 64, 1, 0, 0, 1};  // best block + the newest token
  auto s = run_select(c.cache, q, 3, 16, p);
  for (int64_t i = 0; i < 3; ++i) {
    const int64_t n = 130 - (2 - i);
    std::vector<int32_t> got(s.indices.begin() + i * s.C, s.indices.begin() + (i + 1) * s.C);
    EXPECT_EQ(got, expected_list(c.cache, {{64, 128}, {n - 1, n}}, s.C)) << "token " << i;
  }
}

TEST(BlockSparse, ShortAndEmptyRequestsAndSparseDecodeEqualsDense) {
  // Requests of 0, 5 and 50 tokens: fewer than one selection block, so every
  // visible token is selected and sparse_decode over the lists equals dense decode.
  Rng rng(8);
  testing::PagedCacheSpec spec;
  spec.format = KvFormat::fp8_ds_mla;
  spec.page_size = 16;
  const auto cache = testing::make_paged_cache(rng, {0, 5, 50}, spec);
  const int64_t B = 3, s_q = 2, h_q = 16;
  auto q = testing::random_f32(rng, B * s_q * h_q * kDqk);
  const BlockSparseParams p;  // the NSA defaults
  auto s = run_select(cache, q, s_q, h_q, p);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < s_q; ++i) {
      const int64_t n = std::max<int64_t>(cache.seqlens[b] - (s_q - 1 - i), 0);
      EXPECT_EQ(s.count[b * s_q + i], n);
      for (int64_t k = 0; k < s.C; ++k)
        ASSERT_EQ(s.indices[(b * s_q + i) * s.C + k], k < n ? cache.slot(b, k) : -1) << b << i << k;
    }
  std::vector<double> o1(B * s_q * h_q * kDv), l1(B * h_q * s_q), o2(o1.size()), l2(l1.size());
  SparseDecodeArgs sa;
  sa.q = TensorView::make(q.data(), DType::f32, {B, s_q, h_q, kDqk});
  sa.kv = cache.view();
  sa.indices = TensorView::make(s.indices.data(), DType::i32, {B, s_q, s.C});
  sa.softmax_scale = 0.1f;
  sa.out = TensorView::make(o1.data(), DType::f64, {B, s_q, h_q, kDv});
  sa.lse = TensorView::make(l1.data(), DType::f64, {B, h_q, s_q});
  ASSERT_TRUE(sparse_decode(sa).ok());
  DecodeArgs da;
  da.q = sa.q;
  da.kv = sa.kv;
  da.block_table = cache.block_table_view();
  da.cache_seqlens = cache.seqlens_view();
  da.softmax_scale = 0.1f;
  da.out = TensorView::make(o2.data(), DType::f64, {B, s_q, h_q, kDv});
  da.lse = TensorView::make(l2.data(), DType::f64, {B, h_q, s_q});
  ASSERT_TRUE(mla_decode(da).ok());
  for (size_t k = 0; k < o1.size(); ++k) ASSERT_NEAR(o1[k], o2[k], 1e-12);
  for (size_t k = 0; k < l1.size(); ++k)
    if (std::isinf(l2[k]))
      ASSERT_EQ(l1[k], l2[k]);
    else
      ASSERT_NEAR(l1[k], l2[k], 1e-12 * (1 + std::fabs(l2[k])));
}

// Random long requests: invariants every list must satisfy.
TEST(BlockSparse, RandomListsAreSortedUniqueAndCoverForcedTokens) {
  Rng rng(12);
  testing::PagedCacheSpec spec;
  spec.format = KvFormat::fp8_ds_mla;
  spec.page_size = 64;
  const auto cache = testing::make_paged_cache(rng, {700, 2000}, spec);
  const int64_t B = 2, s_q = 1, h_q = 16;
  auto q = testing::random_f32(rng, B * s_q * h_q * kDqk);
  BlockSparseParams p;
  ASSERT_TRUE(block_sparse_preset("h100", &p).ok());
  auto s = run_select(cache, q, s_q, h_q, p);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = cache.seqlens[b];
    std::vector<int64_t> slot_to_pos;  // invert slots back to positions
    std::vector<bool> taken(n, false);
    int64_t cnt = 0;
    for (int64_t k = 0; k < s.C; ++k) {
      const int32_t v = s.indices[b * s.C + k];
      if (v < 0) {
        for (int64_t r = k; r < s.C; ++r)
          ASSERT_EQ(s.indices[b * s.C + r], -1);  // padding at the end
        break;
      }
      int64_t pos = -1;
      for (int64_t t = 0; t < n && pos < 0; ++t)
        if (cache.slot(b, t) == v) pos = t;
      ASSERT_GE(pos, 0) << "slot " << v << " is not one of request " << b << "'s tokens";
      if (!slot_to_pos.empty()) ASSERT_GT(pos, slot_to_pos.back()) << "not ascending/unique";
      slot_to_pos.push_back(pos);
      taken[pos] = true;
      ++cnt;
    }
    EXPECT_EQ(cnt, s.count[b]);
    const int64_t sel = p.selected_block_size, nJ = (n + sel - 1) / sel;
    for (int64_t t = 0; t < n; ++t) {
      const int64_t J = t / sel;
      const bool forced =
          J < p.initial_blocks || J >= nJ - p.local_blocks || t >= n - p.sliding_window;
      if (forced) ASSERT_TRUE(taken[t]) << "forced token " << t << " missing";
    }
    // Whole blocks (or the window): at most num_selected_blocks blocks + the window.
    EXPECT_LE(cnt, int64_t(p.num_selected_blocks) * sel + p.sliding_window);
    if (n >= int64_t(p.num_selected_blocks) * sel + p.sliding_window)
      EXPECT_GE(cnt, int64_t(p.num_selected_blocks) * sel) << "not all blocks were used";
  }
}

TEST(BlockSparse, Presets) {
  BlockSparseParams p;
  ASSERT_TRUE(block_sparse_preset("nsa", &p).ok());
  EXPECT_EQ(p.block_size, 32);
  EXPECT_EQ(p.stride, 16);
  EXPECT_EQ(p.selected_block_size, 64);
  EXPECT_EQ(p.num_selected_blocks, 16);
  EXPECT_EQ(p.initial_blocks, 1);
  EXPECT_EQ(p.local_blocks, 2);
  EXPECT_EQ(p.sliding_window, 512);
  EXPECT_EQ(block_sparse_capacity(p), 16 * 64 + 512);
  for (const auto& pr : block_sparse_presets())
    EXPECT_TRUE(validate_block_sparse_params(pr.params).ok()) << pr.name;
  expect_error(block_sparse_preset("a100", &p), Errc::invalid_value,
               "unknown block-sparse preset 'a100' (known: nsa, h100, h200, h800, b200, b300)");
}

TEST(BlockSparseValidation, Errors) {
  auto bad = [](auto mutate, const std::string& needle) {
    BlockSparseParams p;
    mutate(p);
    expect_error(validate_block_sparse_params(p), Errc::invalid_value, needle);
  };
  bad([](auto& p) { p.block_size = 0; }, "params.block_size = 0");
  bad([](auto& p) { p.stride = -1; }, "params.stride = -1");
  bad([](auto& p) { p.sliding_window = -5; }, "params.sliding_window = -5 is negative");
  bad([](auto& p) { p.stride = 64; }, "params.stride = 64 is past block_size = 32");
  bad([](auto& p) { p.num_selected_blocks = 2; }, "initial_blocks + local_blocks = 1 + 2");

  Crafted c(100, 0, 0);
  auto q = pointing_queries(1, 16);
  BlockSparseParams p;
  p.block_size = 0;
  Status st;
  run_select(c.cache, q, 1, 16, p, &st);
  expect_error(st, Errc::invalid_value, "params.block_size = 0");

  // Too small an output, a page past the pool, a length past the block table, CUDA.
  p = BlockSparseParams{};
  std::vector<int32_t> idx(16 * 64), bt = c.cache.block_table, lens{100};
  BlockSparseSelectArgs a;
  a.q = TensorView::make(q.data(), DType::f32, {1, 1, 16, kDqk});
  a.kv = c.cache.view();
  a.block_table = TensorView::make(bt.data(), DType::i32, {1, int64_t(bt.size())});
  a.cache_seqlens = TensorView::make(lens.data(), DType::i32, {1});
  a.params = p;
  a.indices = TensorView::make(idx.data(), DType::i32, {1, 1, 16 * 64});
  expect_error(block_sparse_select(a), Errc::invalid_shape,
               "C = 1024 entries per list is below block_sparse_capacity(params) = 1536");
  idx.resize(1536);
  a.indices = TensorView::make(idx.data(), DType::i32, {1, 1, 1536});
  ASSERT_TRUE(block_sparse_select(a).ok());
  bt[2] = int32_t(c.cache.num_pages);
  expect_error(block_sparse_select(a), Errc::out_of_range,
               fmt::format("block_table[0][2] = {} is past num_pages", c.cache.num_pages));
  bt[2] = c.cache.block_table[2];
  lens[0] = int32_t(bt.size() * 16 + 1);
  expect_error(block_sparse_select(a), Errc::out_of_range, "is past the capacity of block_table");
  lens[0] = -3;
  expect_error(block_sparse_select(a), Errc::out_of_range, "cache_seqlens[0] = -3 is negative");
  lens[0] = 100;
  for (TensorView* t : {&a.q, &a.kv.data, &a.block_table, &a.cache_seqlens, &a.indices})
    t->device = Device::cuda();
  expect_error(block_sparse_select(a), Errc::unsupported, "block_sparse_select");
}

}  // namespace
}  // namespace mla
