// KV transfer plans (mla/transfer.hpp): coalescing of contiguous and scattered
// pages, different page sizes, padded strides, partial pages, per-layer and
// single-allocation pools, the indexer cache; a byte-exact round trip through
// the memcpy executor checked by an independent address oracle and by reading
// the tokens back with read_kv; the wire schedule of the NCCL executor; the
// launch conventions and the id exchange; and every validation error.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <filesystem>
#include <map>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "common/expect_status.hpp"
#include "common/random.hpp"
#include "mla/indexer.hpp"
#include "mla/kv_cache.hpp"
#include "mla/transfer.hpp"
#include "transfer/schedule.hpp"

namespace mla {
namespace {

using testing::expect_error;
using testing::Rng;
constexpr int64_t kIdxPage = IndexerCacheLayout::kPageBytes;  // 8448
constexpr uint8_t kPoison = 0xff;

std::vector<int32_t> iota_pages(int n, int first = 0) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

// A request description over latent pools of one layer, dense pages.
TransferRequest latent_request(const std::vector<int32_t>& src, int64_t src_ps,
                               const std::vector<int32_t>& dst, int64_t dst_ps, int64_t tokens,
                               KvFormat f = KvFormat::bf16) {
  TransferRequest r;
  r.num_tokens = tokens;
  r.src_format = r.dst_format = f;
  r.src_latent = {src, 1000, src_ps, 0, 0};
  r.dst_latent = {dst, 1000, dst_ps, 0, 0};
  return r;
}

TransferPlan plan_of(const TransferRequest& r) {
  TransferPlan p;
  Status st = plan_transfer(r, &p);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return p;
}

// --- coalescing ---------------------------------------------------------------

TEST(TransferPlan, ContiguousPagesOnBothSidesBecomeOneRun) {
  const auto src = iota_pages(5, 10), dst = iota_pages(5, 300);
  const TransferPlan p = plan_of(latent_request(src, 64, dst, 64, 300));  // last page partial
  ASSERT_EQ(p.runs.size(), 1u);
  EXPECT_EQ(p.runs[0],
            (CopyRun{10 * 64 * 1152, 300 * 64 * 1152, 300 * 1152, 0, TransferCache::latent}));
  EXPECT_EQ(p.total_bytes, 300 * 1152);
}

TEST(TransferPlan, ScatteredPagesGiveOneRunPerBreak) {
  // src 3,4,5 | 9 ; dst 7,8 | 20 | 21: breaks where either side jumps.
  const std::vector<int32_t> src = {3, 4, 5, 9}, dst = {7, 8, 20, 21};
  const TransferPlan p = plan_of(latent_request(src, 16, dst, 16, 60, KvFormat::fp8_ds_mla));
  const int64_t e = 656, pg = 16 * e;
  ASSERT_EQ(p.runs.size(), 3u);
  EXPECT_EQ(p.runs[0], (CopyRun{3 * pg, 7 * pg, 2 * pg, 0, TransferCache::latent}));
  EXPECT_EQ(p.runs[1], (CopyRun{5 * pg, 20 * pg, pg, 0, TransferCache::latent}));
  EXPECT_EQ(p.runs[2], (CopyRun{9 * pg, 21 * pg, 12 * e, 0, TransferCache::latent}));
}

TEST(TransferPlan, DifferentPageSizesSplitAtEitherSidesPageEnd) {
  // src pages of 64, dst pages of 16 scattered: every dst page is a piece.
  const std::vector<int32_t> src = {0, 1}, dst = {5, 3, 9, 1, 7, 2, 8, 4};
  const TransferPlan p = plan_of(latent_request(src, 64, dst, 16, 100));
  ASSERT_EQ(p.runs.size(), 7u);  // ceil(100 / 16)
  for (size_t i = 0; i < p.runs.size(); ++i) {
    EXPECT_EQ(p.runs[i].src_offset, int64_t(i) * 16 * 1152);
    EXPECT_EQ(p.runs[i].dst_offset, int64_t(dst[i]) * 16 * 1152);
    EXPECT_EQ(p.runs[i].bytes, (i == 6 ? 4 : 16) * 1152);
  }
  // Both contiguous: one run, whatever the page sizes.
  const auto a = iota_pages(2), b = iota_pages(8);
  EXPECT_EQ(plan_of(latent_request(a, 64, b, 16, 100)).runs.size(), 1u);
  EXPECT_EQ(plan_of(latent_request(b, 16, a, 64, 100)).runs.size(), 1u);
}

TEST(TransferPlan, PaddedStridesKeepConsecutivePagesApart) {
  const auto pages = iota_pages(3);
  TransferRequest r = latent_request(pages, 4, pages, 4, 12);
  r.src_latent.page_stride = 4 * 1152 + 256;
  const TransferPlan p = plan_of(r);
  ASSERT_EQ(p.runs.size(), 3u);
  EXPECT_EQ(p.runs[2].src_offset, 2 * (4 * 1152 + 256));
  EXPECT_EQ(p.runs[2].dst_offset, 2 * 4 * 1152);
}

TEST(TransferPlan, TokenRangeOfAChunkStartsInsideAPage) {
  const auto src = iota_pages(6), dst = iota_pages(6, 40);
  TransferRequest r = latent_request(src, 64, dst, 64, 200);
  r.first_token = 100;  // tokens [100, 300): page 1 offset 36 .. page 4 offset 44
  const TransferPlan p = plan_of(r);
  ASSERT_EQ(p.runs.size(), 1u);
  EXPECT_EQ(p.runs[0],
            (CopyRun{100 * 1152, (40 * 64 + 100) * 1152, 200 * 1152, 0, TransferCache::latent}));
  r.num_tokens = 0;
  EXPECT_TRUE(plan_of(r).runs.empty());
}

TEST(TransferPlan, ByLayerGroupsRunsPerLayerLatentThenIndexer) {
  const auto pages = iota_pages(3, 1);
  TransferRequest r = latent_request(pages, 64, pages, 64, 130);
  r.num_layers = 3;
  r.with_indexer = true;
  r.src_indexer = r.dst_indexer = {pages, 10, 64, 0, 0};
  const TransferPlan p = plan_of(r);
  ASSERT_EQ(p.layer_begin, (std::vector<size_t>{0, 3, 6, 9}));
  for (int l = 0; l < 3; ++l) {
    const CopyRun* g = &p.runs[3 * l];
    EXPECT_EQ(g[0], (CopyRun{64 * 1152, 64 * 1152, 130 * 1152, l, TransferCache::latent}));
    // Indexer: two whole pages, then the 2-token tail's codes, which start where
    // the second page ends (one run); the tail's scales are a run of their own.
    EXPECT_EQ(g[1],
              (CopyRun{kIdxPage, kIdxPage, 2 * kIdxPage + 2 * 128, l, TransferCache::indexer}));
    EXPECT_EQ(g[2], (CopyRun{3 * kIdxPage + 8192, 3 * kIdxPage + 8192, 2 * 4, l,
                             TransferCache::indexer}));
  }
  EXPECT_EQ(p.total_bytes, 3 * (130 * 1152 + 2 * kIdxPage + 2 * 132));
}

TEST(TransferPlan, WholeOrderCoalescesAcrossLayersOfPageMajorPools) {
  // Page-major pools: a page holds every layer's slice, back to back.
  constexpr int L = 4;
  const int64_t slice = 8 * 656;
  const std::vector<int32_t> src = {2, 7}, dst = {0, 5};
  TransferRequest r = latent_request(src, 8, dst, 8, 16, KvFormat::fp8_ds_mla);
  r.num_layers = L;
  r.src_latent.page_stride = r.dst_latent.page_stride = L * slice;
  r.src_latent.layer_stride = r.dst_latent.layer_stride = slice;
  r.order = TransferOrder::whole;
  const TransferPlan p = plan_of(r);
  ASSERT_EQ(p.runs.size(), 2u);  // one run per page, all layers
  EXPECT_EQ(p.runs[0], (CopyRun{2 * L * slice, 0, L * slice, 0, TransferCache::latent}));
  EXPECT_EQ(p.runs[1],
            (CopyRun{7 * L * slice, 5 * L * slice, L * slice, 0, TransferCache::latent}));
  // by_layer keeps layers apart: 2 runs per layer.
  r.order = TransferOrder::by_layer;
  EXPECT_EQ(plan_of(r).runs.size(), 2u * L);
}

// --- byte-exact round trip -------------------------------------------------------

// A pool of `layers` layers in one allocation (layer-major or page-major) or in
// separate allocations, every byte poisoned; addresses computed here, apart
// from the planner, are the oracle.
struct HostPool {
  int64_t layers, num_pages, page_size, page_stride, layer_stride, entry;
  bool separate;
  std::vector<std::vector<uint8_t>> mem;  // one per layer when separate, else one
  HostPool(int64_t L, int64_t pages, int64_t ps, int64_t entry_bytes, int64_t pad, int layout)
      : layers(L), num_pages(pages), page_size(ps), entry(entry_bytes), separate(layout == 0) {
    const int64_t pb = ps * entry_bytes;
    if (layout == 2) {  // page-major
      layer_stride = pb + pad;
      page_stride = L * layer_stride;
    } else {
      page_stride = pb + pad;
      layer_stride = layout == 1 ? pages * page_stride : 0;
    }
    const int64_t per = layout == 2 ? pages * page_stride : pages * page_stride;
    mem.assign(separate ? L : 1, std::vector<uint8_t>(separate ? per : L * per + 64, kPoison));
  }
  void* base(int64_t l) { return separate ? mem[l].data() : mem[0].data() + l * layer_stride; }
  std::vector<void*> bases() {
    std::vector<void*> v;
    for (int64_t l = 0; l < layers; ++l) v.push_back(base(l));
    return v;
  }
  uint8_t* at(int64_t l, int64_t page, int64_t off) {
    return static_cast<uint8_t*>(base(l)) + page * page_stride + off;
  }
  TransferSide side(const std::vector<int32_t>& pages) const {
    return {pages, num_pages, page_size, page_stride, layer_stride};
  }
  size_t poisoned() const {
    size_t n = 0;
    for (const auto& m : mem) n += std::count(m.begin(), m.end(), kPoison);
    return n;
  }
};

std::vector<int32_t> random_pages(Rng& rng, int64_t need, int64_t pool, bool contiguous) {
  std::vector<int32_t> all = iota_pages(static_cast<int>(pool));
  if (!contiguous) rng.shuffle(all);
  const int64_t first = contiguous ? rng.randint(0, pool - need) : 0;
  return std::vector<int32_t>(all.begin() + first, all.begin() + first + need);
}

struct RoundTrip {
  KvFormat format;
  int64_t tokens, src_ps, dst_ps, src_pad, dst_pad;
  int src_layout, dst_layout;  // 0 separate, 1 layer-major, 2 page-major
  bool contiguous;
  TransferOrder order;
};

// Source pools hold random bytes on the request's tokens; after the copy every
// token's bytes (latent entry; indexer codes and scale) equal the source's, and
// every other destination byte is still poison.
void run_round_trip(const RoundTrip& c, uint64_t seed) {
  SCOPED_TRACE(::testing::Message()
               << "tokens " << c.tokens << " ps " << c.src_ps << "->" << c.dst_ps << " layouts "
               << c.src_layout << "->" << c.dst_layout << " order " << int(c.order));
  Rng rng(seed);
  constexpr int64_t L = 3;
  const int64_t e = kv_entry_bytes(c.format);
  const int64_t sp = (c.tokens + c.src_ps - 1) / c.src_ps,
                dp = (c.tokens + c.dst_ps - 1) / c.dst_ps;
  const int64_t ip = (c.tokens + 63) / 64;
  HostPool src(L, sp + 3, c.src_ps, e, c.src_pad, c.src_layout);
  HostPool dst(L, dp + 5, c.dst_ps, e, c.dst_pad, c.dst_layout);
  HostPool isrc(L, ip + 2, 64, 132, c.src_pad, c.src_layout);
  HostPool idst(L, ip + 4, 64, 132, c.dst_pad, c.dst_layout);
  const auto s_pages = random_pages(rng, sp, src.num_pages, c.contiguous);
  const auto d_pages = random_pages(rng, dp, dst.num_pages, c.contiguous);
  const auto si_pages = random_pages(rng, ip, isrc.num_pages, c.contiguous);
  const auto di_pages = random_pages(rng, ip, idst.num_pages, c.contiguous);
  auto token_bytes = [](HostPool& p, const std::vector<int32_t>& pages, int64_t l, int64_t t,
                        int64_t e) {
    return p.at(l, pages[t / p.page_size], (t % p.page_size) * e);
  };
  auto idx_code = [](HostPool& p, const std::vector<int32_t>& pages, int64_t l, int64_t t) {
    return p.at(l, pages[t / 64], (t % 64) * 128);
  };
  auto idx_scale = [](HostPool& p, const std::vector<int32_t>& pages, int64_t l, int64_t t) {
    return p.at(l, pages[t / 64], 8192 + (t % 64) * 4);
  };
  for (int64_t l = 0; l < L; ++l)
    for (int64_t t = 0; t < c.tokens; ++t) {
      uint8_t* a = token_bytes(src, s_pages, l, t, e);
      for (int64_t i = 0; i < e; ++i) a[i] = static_cast<uint8_t>(rng.randint(0, 254));
      uint8_t* k = idx_code(isrc, si_pages, l, t);
      for (int i = 0; i < 128; ++i) k[i] = static_cast<uint8_t>(rng.randint(0, 254));
      uint8_t* s = idx_scale(isrc, si_pages, l, t);
      for (int i = 0; i < 4; ++i) s[i] = static_cast<uint8_t>(rng.randint(0, 254));
    }

  TransferRequest r;
  r.num_tokens = c.tokens;
  r.num_layers = L;
  r.src_format = r.dst_format = c.format;
  r.src_latent = src.side(s_pages);
  r.dst_latent = dst.side(d_pages);
  r.with_indexer = true;
  r.src_indexer = isrc.side(si_pages);
  r.dst_indexer = idst.side(di_pages);
  r.order = c.order;
  TransferPlan plan;
  ASSERT_TRUE(plan_transfer(r, &plan).ok());
  EXPECT_EQ(plan.total_bytes, L * c.tokens * (e + 132));  // exactly the request's bytes
  const auto sb = src.bases(), db = dst.bases(), sib = isrc.bases(), dib = idst.bases();
  ASSERT_TRUE(execute_copy_plan(plan, {sb, sib}, {db, dib}).ok());
  for (int64_t l = 0; l < L; ++l)
    for (int64_t t = 0; t < c.tokens; ++t) {
      ASSERT_EQ(
          std::memcmp(token_bytes(dst, d_pages, l, t, e), token_bytes(src, s_pages, l, t, e), e), 0)
          << "latent layer " << l << " token " << t;
      ASSERT_EQ(std::memcmp(idx_code(idst, di_pages, l, t), idx_code(isrc, si_pages, l, t), 128), 0)
          << "indexer codes layer " << l << " token " << t;
      ASSERT_EQ(std::memcmp(idx_scale(idst, di_pages, l, t), idx_scale(isrc, si_pages, l, t), 4), 0)
          << "indexer scale layer " << l << " token " << t;
    }
  // Nothing else written: every byte of the destinations outside the tokens is poison.
  const size_t dst_total = dst.mem.size() * dst.mem[0].size();
  EXPECT_EQ(dst.poisoned(), dst_total - L * c.tokens * e);
  const size_t idst_total = idst.mem.size() * idst.mem[0].size();
  EXPECT_EQ(idst.poisoned(), idst_total - L * c.tokens * 132);
}

TEST(TransferRoundTrip, ByteExactOverLayoutsPageSizesAndOrders) {
  const std::vector<RoundTrip> cases = {
      {KvFormat::bf16, 300, 64, 64, 0, 0, 0, 0, false, TransferOrder::by_layer},
      {KvFormat::bf16, 300, 64, 64, 0, 0, 0, 0, true, TransferOrder::by_layer},
      {KvFormat::fp8_ds_mla, 257, 64, 16, 48, 0, 1, 0, false, TransferOrder::by_layer},
      {KvFormat::fp8_ds_mla, 129, 1, 128, 0, 16, 0, 2, false, TransferOrder::whole},
      {KvFormat::bf16, 64, 32, 64, 0, 0, 2, 2, true, TransferOrder::whole},
      {KvFormat::bf16, 1, 64, 1, 16, 16, 1, 1, false, TransferOrder::whole},
      {KvFormat::fp8_ds_mla, 0, 64, 64, 0, 0, 0, 0, false, TransferOrder::by_layer},
      {KvFormat::bf16, 200, 128, 32, 0, 0, 2, 1, true, TransferOrder::by_layer},
  };
  uint64_t seed = 7;
  for (const RoundTrip& c : cases) run_round_trip(c, seed++);
}

// The tokens read back with read_kv (dequantised, as decode sees them) from the
// destination equal those read from the source, bit for bit.
TEST(TransferRoundTrip, ReadKvOfDestinationEqualsSource) {
  for (KvFormat f : {KvFormat::bf16, KvFormat::fp8_ds_mla}) {
    SCOPED_TRACE(kv_format_name(f));
    Rng rng(11);
    const int32_t len = 333;
    testing::PagedCacheSpec spec;
    spec.format = f;
    spec.page_size = 64;
    spec.page_pad = 8;
    spec.spare_pages = 4;
    const testing::PagedCache source = testing::make_paged_cache(rng, {len}, spec);
    testing::PagedCacheSpec dspec = spec;
    dspec.page_size = 16;
    dspec.page_pad = 0;
    dspec.spare_pages = 30;
    testing::PagedCache dest = testing::make_paged_cache(rng, {len}, dspec);
    const int64_t esz = f == KvFormat::bf16 ? 2 : 1;
    std::memset(dest.storage.data(), kPoison, dest.storage.size() * 8);  // forget its random data

    TransferRequest r;
    r.num_tokens = len;
    r.src_format = r.dst_format = f;
    const std::vector<int32_t> sp(source.block_table.begin(),
                                  source.block_table.begin() + source.max_pages);
    const std::vector<int32_t> dp(dest.block_table.begin(),
                                  dest.block_table.begin() + dest.max_pages);
    r.src_latent = {sp, source.num_pages, 64, source.page_stride() * esz, 0};
    r.dst_latent = {dp, dest.num_pages, 16, dest.page_stride() * esz, 0};
    TransferPlan plan;
    ASSERT_TRUE(plan_transfer(r, &plan).ok());
    void* sb[] = {const_cast<uint64_t*>(source.storage.data())};
    void* db[] = {dest.storage.data()};
    ASSERT_TRUE(execute_copy_plan(plan, {sb, {}}, {db, {}}).ok());

    auto read = [&](const testing::PagedCache& c, std::vector<float>& ckv,
                    std::vector<float>& rope) {
      std::vector<int64_t> slots(len);
      for (int64_t t = 0; t < len; ++t) slots[t] = c.slot(0, t);
      ckv.assign(len * 512, 0.f);
      rope.assign(len * 64, 0.f);
      ReadKvArgs a;
      a.cache = c.view();
      a.slots = TensorView::make(slots.data(), DType::i64, {len});
      a.c_kv = TensorView::make(ckv.data(), DType::f32, {len, 512});
      a.k_rope = TensorView::make(rope.data(), DType::f32, {len, 64});
      Status st = read_kv(a);
      ASSERT_TRUE(st.ok()) << st.to_string();
    };
    std::vector<float> c0, r0, c1, r1;
    read(source, c0, r0);
    read(dest, c1, r1);
    ASSERT_EQ(std::memcmp(c0.data(), c1.data(), c0.size() * 4), 0);
    ASSERT_EQ(std::memcmp(r0.data(), r1.data(), r0.size() * 4), 0);
    for (float x : c1) ASSERT_TRUE(std::isfinite(x));  // no poison read back
  }
}

// --- validation ------------------------------------------------------------------

TEST(TransferPlan, ValidationErrorsNameTheArgumentAndValue) {
  const std::vector<int32_t> pages = {0, 1, 912, 3};
  TransferPlan p;
  const std::vector<int32_t> four = iota_pages(4);
  TransferRequest r = latent_request(pages, 64, four, 64, 200);
  r.src_latent.num_pages = 900;
  expect_error(plan_transfer(r, &p), Errc::out_of_range,
               {"src_latent.pages[2] = 912", "past num_pages = 900"});
  r.num_tokens = 128;  // reads pages 0 and 1 only: the bad id is not touched
  EXPECT_TRUE(plan_transfer(r, &p).ok());
  r.num_tokens = 300;
  expect_error(plan_transfer(r, &p), Errc::out_of_range,
               {"first_token + num_tokens = 300", "capacity of src_latent: 4 pages * 64 = 256"});
  const std::vector<int32_t> neg = {0, -1}, two = iota_pages(2);
  r = latent_request(two, 64, neg, 64, 100);
  expect_error(plan_transfer(r, &p), Errc::out_of_range, {"dst_latent.pages[1] = -1 is negative"});
  r = latent_request(two, 64, two, 64, 100);
  r.dst_format = KvFormat::fp8_ds_mla;
  expect_error(plan_transfer(r, &p), Errc::invalid_value,
               {"src_format = bf16", "dst_format = fp8_ds_mla"});
  r.dst_format = KvFormat::bf16;
  r.num_tokens = -5;
  expect_error(plan_transfer(r, &p), Errc::out_of_range, {"num_tokens = -5"});
  r.num_tokens = 10;
  r.first_token = -1;
  expect_error(plan_transfer(r, &p), Errc::out_of_range, {"first_token = -1"});
  r.first_token = 0;
  r.num_layers = 0;
  expect_error(plan_transfer(r, &p), Errc::invalid_value, {"num_layers = 0"});
  r.num_layers = 2;
  r.dst_latent.page_size = 0;
  expect_error(plan_transfer(r, &p), Errc::invalid_value, {"dst_latent.page_size = 0"});
  r.dst_latent.page_size = 64;
  r.src_latent.page_stride = 1000;
  expect_error(plan_transfer(r, &p), Errc::invalid_stride,
               {"src_latent.page_stride = 1000", "73728"});
  r.src_latent.page_stride = 0;
  r.src_latent.layer_stride = 64 * 1152 * 10;  // 10 pages of a 1000-page pool
  expect_error(plan_transfer(r, &p), Errc::invalid_stride,
               {"src_latent.layer_stride = 737280", "overlap"});
  r.src_latent.layer_stride = 0;
  r.with_indexer = true;
  r.src_indexer = {pages, 10, 32, 0, 0};
  r.dst_indexer = {pages, 10, 64, 0, 0};
  expect_error(plan_transfer(r, &p), Errc::invalid_value,
               {"src_indexer.page_size = 32", "64 tokens"});
  expect_error(plan_transfer(r, nullptr), Errc::invalid_value, {"plan"});

  // The executor: a missing layer base is an error before any byte moves.
  r = latent_request(two, 64, two, 64, 100);
  r.num_layers = 2;
  ASSERT_TRUE(plan_transfer(r, &p).ok());
  std::vector<uint8_t> a(1000 * 64 * 1152, 1), b(1000 * 64 * 1152, 2);
  void* one[] = {a.data()};
  void* both[] = {b.data(), b.data()};
  expect_error(execute_copy_plan(p, {one, {}}, {both, {}}), Errc::invalid_value,
               {"src.latent[1]", "1 given"});
  EXPECT_EQ(b[0], 2);
}

// --- the NCCL executor's wire schedule ---------------------------------------------

TEST(TransferSchedule, EveryRunOnceLargeDirectSmallPackedWithinStaging) {
  Rng rng(5);
  TransferPlan plan;
  plan.layer_begin = {0};
  for (int g = 0; g < 4; ++g) {
    for (int i = 0; i < 40; ++i)
      plan.runs.push_back({0, 0,
                           rng.randint(1, 3) == 1 ? rng.randint(4096, 9000) : rng.randint(1, 900),
                           g, TransferCache::latent});
    plan.layer_begin.push_back(plan.runs.size());
  }
  for (int64_t staging : {int64_t{0}, int64_t{2048}, int64_t{1} << 20}) {
    SCOPED_TRACE(staging);
    transfer::Schedule s;
    ASSERT_TRUE(transfer::build_schedule(plan, 4096, staging, false, &s).ok());
    std::vector<int> seen(plan.runs.size(), 0);
    size_t messages = 0, last_group = 0;
    for (const auto& round : s.rounds) {
      EXPECT_GE(round.group, last_group);  // groups in order
      last_group = round.group;
      int64_t end = 0;
      for (size_t i : round.direct) {
        ++seen[i];
        EXPECT_EQ(plan.runs[i].layer, int(round.group));
        EXPECT_TRUE(plan.runs[i].bytes >= 4096 || plan.runs[i].bytes > staging);
      }
      for (const auto& piece : round.staged) {
        ++seen[piece.run];
        EXPECT_EQ(plan.runs[piece.run].layer, int(round.group));
        EXPECT_LT(plan.runs[piece.run].bytes, 4096);
        EXPECT_EQ(piece.staging_offset % transfer::kStagingAlign, 0);
        EXPECT_GE(piece.staging_offset, end);  // no overlap
        end = piece.staging_offset + plan.runs[piece.run].bytes;
      }
      EXPECT_LE(round.staged_bytes, staging);
      EXPECT_LE(end, round.staged_bytes);
      messages += round.direct.size() + (round.staged.empty() ? 0 : 1);
    }
    for (int n : seen) EXPECT_EQ(n, 1);
    EXPECT_EQ(s.messages, messages);
    if (staging == 0) EXPECT_EQ(messages, plan.runs.size());
    if (staging == (1 << 20)) EXPECT_EQ(s.rounds.size(), 4u);  // one round per layer
  }
  // The staging size the executor asks for holds every layer's small runs at once.
  const int64_t need = nccl_transfer_staging_bytes(plan, 4096);
  transfer::Schedule s;
  ASSERT_TRUE(transfer::build_schedule(plan, 4096, need, false, &s).ok());
  EXPECT_EQ(s.rounds.size(), 4u);
  expect_error(transfer::build_schedule(plan, -1, 0, false, &s), Errc::invalid_value,
               {"direct_min_bytes = -1"});
}

// Pipelined (pack stream): two slots of half the buffer each. The second slot
// must start 16-byte aligned, and the staged message of a round fits its slot.
TEST(TransferSchedule, PipelinedSlotsAreHalvesAlignedAndHoldTheirRounds) {
  EXPECT_EQ(transfer::staging_slot_bytes(1000, false), 1000);
  EXPECT_EQ(transfer::staging_slot_bytes(1000, true), 496);  // 500 rounded down to 16
  EXPECT_EQ(transfer::staging_slot_bytes(0, true), 0);
  EXPECT_EQ(transfer::staging_slot_bytes(31, true), 0);  // too small: every run direct
  for (int64_t bytes : {int64_t{48}, int64_t{4096}, int64_t{1} << 20, int64_t{(1 << 20) + 24}})
    EXPECT_EQ(transfer::staging_slot_bytes(bytes, true) % transfer::kStagingAlign, 0) << bytes;
  TransferPlan plan;
  plan.layer_begin = {0};
  for (int g = 0; g < 3; ++g) {
    for (int i = 0; i < 30; ++i) plan.runs.push_back({0, 0, 700, g, TransferCache::latent});
    plan.layer_begin.push_back(plan.runs.size());
  }
  // The executor's staging size holds a layer; halved, each layer takes two rounds.
  const int64_t need = nccl_transfer_staging_bytes(plan, 4096);
  transfer::Schedule s;
  ASSERT_TRUE(
      transfer::build_schedule(plan, 4096, transfer::staging_slot_bytes(need, true), false, &s)
          .ok());
  EXPECT_EQ(s.rounds.size(), 6u);
  for (const auto& round : s.rounds)
    EXPECT_LE(round.staged_bytes, transfer::staging_slot_bytes(need, true));
}

// Spanning rounds: small runs of consecutive layers share one message until
// the buffer is full; every run still travels once, in plan order, and a
// round's direct messages stay bounded.
TEST(TransferSchedule, SpanningRoundsFillTheBufferAcrossLayers) {
  TransferPlan plan;
  plan.layer_begin = {0};
  for (int g = 0; g < 10; ++g) {
    for (int i = 0; i < 8; ++i) plan.runs.push_back({0, 0, 1000, g, TransferCache::latent});
    plan.layer_begin.push_back(plan.runs.size());
  }
  transfer::Schedule s;
  // 1008 bytes a run (aligned): 20 per 20160-byte buffer = 2.5 layers a round.
  ASSERT_TRUE(transfer::build_schedule(plan, 4096, 20160, true, &s).ok());
  ASSERT_EQ(s.rounds.size(), 4u);
  size_t next = 0;
  for (const auto& round : s.rounds) {
    EXPECT_EQ(round.group, size_t(plan.runs[round.staged.front().run].layer));
    for (const auto& piece : round.staged) EXPECT_EQ(piece.run, next++);
    EXPECT_LE(round.staged_bytes, 20160);
  }
  EXPECT_EQ(next, plan.runs.size());
  EXPECT_EQ(s.rounds[0].staged.size(), 20u);
  EXPECT_EQ(s.rounds[3].staged.size(), 20u);
  // Without spanning: one round per layer.
  ASSERT_TRUE(transfer::build_schedule(plan, 4096, 20160, false, &s).ok());
  EXPECT_EQ(s.rounds.size(), 10u);
  // All direct (no staging): rounds of at most kMaxDirectPerRound messages.
  TransferPlan big;
  big.layer_begin = {0};
  for (int g = 0; g < 3; ++g) {
    for (int i = 0; i < 300; ++i) big.runs.push_back({0, 0, 64, g, TransferCache::latent});
    big.layer_begin.push_back(big.runs.size());
  }
  ASSERT_TRUE(transfer::build_schedule(big, 0, 0, true, &s).ok());
  ASSERT_EQ(s.rounds.size(), 2u);
  EXPECT_EQ(s.rounds[0].direct.size(), transfer::kMaxDirectPerRound);
  EXPECT_EQ(s.rounds[1].direct.size(), 900 - transfer::kMaxDirectPerRound);
  EXPECT_EQ(s.messages, 900u);
}

// --- launch conventions and bootstrap ------------------------------------------------

TEST(TransferLaunch, TorchrunEnvironment) {
  std::map<std::string, std::string> env = {
      {"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.0.0.7"}, {"MASTER_PORT", "29500"}};
  auto get = [&](const char* n) -> const char* {
    auto it = env.find(n);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  LaunchInfo li;
  ASSERT_TRUE(launch_info_from_env(&li, get).ok());
  EXPECT_EQ(li.rank, 1);
  EXPECT_EQ(li.world_size, 2);
  EXPECT_EQ(li.local_rank, 1);  // RANK when LOCAL_RANK is unset
  EXPECT_EQ(li.master_addr, "10.0.0.7");
  EXPECT_EQ(li.master_port, 29500);
  env["LOCAL_RANK"] = "0";
  ASSERT_TRUE(launch_info_from_env(&li, get).ok());
  EXPECT_EQ(li.local_rank, 0);
  env["RANK"] = "2";
  expect_error(launch_info_from_env(&li, get), Errc::out_of_range, {"RANK = 2", "[0, 1]"});
  env["RANK"] = "1x";
  expect_error(launch_info_from_env(&li, get), Errc::invalid_value,
               {"RANK = \"1x\" is not an integer"});
  env["RANK"] = "0";
  env["MASTER_PORT"] = "70000";
  expect_error(launch_info_from_env(&li, get), Errc::out_of_range, {"MASTER_PORT = 70000"});
  env.erase("MASTER_PORT");
  expect_error(launch_info_from_env(&li, get), Errc::invalid_value, {"MASTER_PORT is not set"});
  env.erase("WORLD_SIZE");
  expect_error(launch_info_from_env(&li, get), Errc::invalid_value, {"WORLD_SIZE is not set"});
}

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// Rank 0 and two others as threads of this process: every rank ends with rank
// 0's bytes, over TCP and through a file.
TEST(TransferLaunch, IdExchangeOverTcpAndFile) {
  std::array<uint8_t, 128> id{};
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<uint8_t>(i * 37 + 1);
  const std::string file =
      (std::filesystem::temp_directory_path() / ("mla_id_" + std::to_string(::getpid()))).string();
  for (int mode = 0; mode < 2; ++mode) {
    SCOPED_TRACE(mode == 0 ? "tcp" : "file");
    const int port = free_port();
    std::vector<std::array<uint8_t, 128>> got(3);
    got[0] = id;
    std::vector<Status> st(3);
    std::vector<std::thread> ts;
    for (int r = 2; r >= 0; --r)  // receivers first: they must wait for rank 0
      ts.emplace_back([&, r] {
        LaunchInfo li{r, 3, r, "127.0.0.1", port};
        st[r] = mode == 0 ? exchange_bytes_tcp(li, got[r].data(), 128, 10000)
                          : exchange_bytes_file(li, file, got[r].data(), 128, 10000);
      });
    for (auto& t : ts) t.join();
    for (int r = 0; r < 3; ++r) {
      EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].to_string();
      EXPECT_EQ(got[r], id) << "rank " << r;
    }
  }
  std::filesystem::remove(file);
  std::array<uint8_t, 128> buf{};
  LaunchInfo late{1, 2, 1, "127.0.0.1", free_port()};
  expect_error(exchange_bytes_tcp(late, buf.data(), 128, 100), Errc::invalid_value,
               {"rank 1 could not connect to rank 0 at 127.0.0.1:"});
  expect_error(exchange_bytes_file(late, file, buf.data(), 128, 100), Errc::invalid_value,
               {"did not appear within 100 ms"});
  LaunchInfo bad{3, 2, 0, "127.0.0.1", 1};
  expect_error(exchange_bytes_tcp(bad, buf.data(), 128, 100), Errc::out_of_range, {"rank = 3"});
}

}  // namespace
}  // namespace mla
