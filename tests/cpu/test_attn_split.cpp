// Head split vs batch split of decode attention (include/mla/attn_split.hpp):
// the partitions cover every head and request exactly once, the byte counts
// match an independent count of pages, the capacity is the largest batch whose
// cache fits, and every bad argument gets an error naming it.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "common/expect_status.hpp"
#include "mla/attn_split.hpp"

namespace mla::parallel {
namespace {

using mla::testing::expect_error;

TEST(AttnSplit, HeadsAreEqualContiguousSlicesCoveringAll) {
  for (int world : {1, 2, 4, 8}) {
    for (int heads : {16, 64, 128}) {
      if (heads % world) continue;
      std::vector<int> owner(heads, -1);
      for (int r = 0; r < world; ++r) {
        RankSlice s;
        ASSERT_TRUE(split_heads(heads, world, r, &s).ok());
        EXPECT_EQ(s.count, heads / world);
        for (int64_t h = s.begin; h < s.begin + s.count; ++h) {
          ASSERT_EQ(owner[h], -1) << "head " << h << " given twice";
          owner[h] = r;
        }
      }
      for (int h = 0; h < heads; ++h) EXPECT_NE(owner[h], -1) << "head " << h;
    }
  }
  RankSlice s;
  ASSERT_TRUE(split_heads(128, 2, 1, &s).ok());
  EXPECT_EQ(s.begin, 64);
  EXPECT_EQ(s.count, 64);
}

TEST(AttnSplit, RequestsDifferByAtMostOneAndCoverAll) {
  for (int world : {1, 2, 3, 4, 8}) {
    for (int64_t batch : {0, 1, 2, 5, 7, 64, 129}) {
      std::vector<int> owner(batch, -1);
      int64_t lo = batch, hi = 0, next = 0;
      for (int r = 0; r < world; ++r) {
        RankSlice s;
        ASSERT_TRUE(split_requests(batch, world, r, &s).ok());
        EXPECT_EQ(s.begin, next) << "slices are contiguous and in rank order";
        next = s.begin + s.count;
        lo = std::min(lo, s.count);
        hi = std::max(hi, s.count);
        for (int64_t b = s.begin; b < s.begin + s.count; ++b) owner[b] = r;
      }
      EXPECT_EQ(next, batch);
      EXPECT_LE(hi - lo, 1) << "batch " << batch << " world " << world;
      for (int64_t b = 0; b < batch; ++b) EXPECT_NE(owner[b], -1);
    }
  }
  RankSlice s;
  ASSERT_TRUE(split_requests(7, 2, 1, &s).ok());
  EXPECT_EQ(s.begin, 4);
  EXPECT_EQ(s.count, 3);
}

TEST(AttnSplit, CostOfBothSplits) {
  AttnSplitShape sh;  // 2 GPUs, 128 heads, 61 layers, hidden 7168
  sh.batch = 7;
  sh.context = 1000;  // 16 pages of 64 (the last one partly used)
  sh.format = KvFormat::bf16;
  const int64_t per_request = 16 * 64 * 1152 * 61;

  AttnSplitCost h;
  ASSERT_TRUE(attn_split_cost(sh, AttnSplit::heads, &h).ok());
  EXPECT_EQ(h.heads_per_gpu, 64);
  EXPECT_EQ(h.requests_per_gpu, 7) << "one latent head: every GPU holds every request";
  EXPECT_EQ(h.kv_bytes_per_request, per_request);
  EXPECT_EQ(h.kv_bytes_per_gpu, 7 * per_request);
  EXPECT_EQ(h.kv_bytes_read_per_layer, 7 * 1000 * 1152);
  EXPECT_EQ(h.allreduce_payload_bytes, 7 * 7168 * 2);
  EXPECT_EQ(h.allreduce_wire_bytes, 7 * 7168 * 2) << "ring on 2 GPUs: 2 (w-1)/w = 1x";
  EXPECT_EQ(h.allgather_wire_bytes, 7 * 128 * 512 * 2 / 2);
  EXPECT_GT(h.allgather_wire_bytes, 4 * h.allreduce_wire_bytes);

  AttnSplitCost b;
  ASSERT_TRUE(attn_split_cost(sh, AttnSplit::batch, &b).ok());
  EXPECT_EQ(b.heads_per_gpu, 128);
  EXPECT_EQ(b.requests_per_gpu, 4) << "7 requests on 2 GPUs: the fuller one has 4";
  EXPECT_EQ(b.kv_bytes_per_gpu, 4 * per_request);
  EXPECT_EQ(b.kv_bytes_read_per_layer, 4 * 1000 * 1152);
  EXPECT_EQ(b.allreduce_payload_bytes, 0);
  EXPECT_EQ(b.allreduce_wire_bytes, 0);

  sh.format = KvFormat::fp8_ds_mla;
  sh.world_size = 4;
  sh.batch = 64;
  sh.context = 64;  // exactly one page
  ASSERT_TRUE(attn_split_cost(sh, AttnSplit::heads, &h).ok());
  EXPECT_EQ(h.heads_per_gpu, 32);
  EXPECT_EQ(h.kv_bytes_per_request, 64 * 656 * 61);
  EXPECT_EQ(h.allreduce_wire_bytes, 2 * 3 * (64 * 7168 * 2) / 4);
  ASSERT_TRUE(attn_split_cost(sh, AttnSplit::batch, &b).ok());
  EXPECT_EQ(b.requests_per_gpu, 16);

  sh.world_size = 1;  // one GPU: both splits are the whole thing, nothing to reduce
  ASSERT_TRUE(attn_split_cost(sh, AttnSplit::heads, &h).ok());
  EXPECT_EQ(h.allreduce_payload_bytes, 0);
  EXPECT_EQ(h.allreduce_wire_bytes, 0);
  sh.context = 0;  // an empty cache holds nothing
  ASSERT_TRUE(attn_split_cost(sh, AttnSplit::batch, &b).ok());
  EXPECT_EQ(b.kv_bytes_per_gpu, 0);
}

TEST(AttnSplit, CapacityIsTheLargestBatchThatFits) {
  AttnSplitShape sh;
  sh.context = 32768;
  sh.layers = 61;
  const int64_t per_request = int64_t{32768} * 1152 * 61;  // 2.30 GB
  AttnSplitCapacity h, b;
  const int64_t budget = 10 * per_request + per_request - 1;  // 10 fit, 11 do not
  ASSERT_TRUE(attn_split_capacity(sh, AttnSplit::heads, budget, &h).ok());
  ASSERT_TRUE(attn_split_capacity(sh, AttnSplit::batch, budget, &b).ok());
  EXPECT_EQ(h.requests_per_gpu, 10);
  EXPECT_EQ(h.total_batch, 10) << "head split replicates the cache";
  EXPECT_EQ(b.requests_per_gpu, 10);
  EXPECT_EQ(b.total_batch, 20) << "batch split: world_size times as many";
  // What fits is what the cost says fits: batch = capacity costs <= budget.
  sh.batch = b.total_batch;
  AttnSplitCost c;
  ASSERT_TRUE(attn_split_cost(sh, AttnSplit::batch, &c).ok());
  EXPECT_LE(c.kv_bytes_per_gpu, budget);
  sh.batch = b.total_batch + 1;
  ASSERT_TRUE(attn_split_cost(sh, AttnSplit::batch, &c).ok());
  EXPECT_GT(c.kv_bytes_per_gpu, budget);
  ASSERT_TRUE(attn_split_capacity(sh, AttnSplit::heads, 0, &h).ok());
  EXPECT_EQ(h.total_batch, 0);
}

TEST(AttnSplit, BadArgumentsAreNamed) {
  RankSlice s;
  expect_error(split_heads(128, 3, 0, &s), Errc::invalid_value,
               {"num_heads = 128", "world_size = 3"});
  expect_error(split_heads(0, 1, 0, &s), Errc::out_of_range, {"num_heads = 0"});
  expect_error(split_heads(128, 2, 2, &s), Errc::out_of_range, {"rank = 2", "world_size = 2"});
  expect_error(split_heads(128, 0, 0, &s), Errc::out_of_range, {"world_size = 0"});
  expect_error(split_heads(128, 2, 0, nullptr), Errc::invalid_value, {"out"});
  expect_error(split_requests(-1, 2, 0, &s), Errc::out_of_range, {"batch = -1"});
  expect_error(split_requests(4, 2, -1, &s), Errc::out_of_range, {"rank = -1"});

  AttnSplitShape sh;
  AttnSplitCost c;
  AttnSplitCapacity cap;
  auto bad = [&](auto&& edit, Errc code, const char* fragment) {
    AttnSplitShape x = sh;
    edit(x);
    expect_error(attn_split_cost(x, AttnSplit::heads, &c), code, {fragment});
  };
  bad(
      [](AttnSplitShape& x) {
        x.num_heads = 100;
        x.world_size = 8;
      },
      Errc::invalid_value, "num_heads = 100 is not a multiple of world_size = 8");
  bad([](AttnSplitShape& x) { x.batch = -3; }, Errc::out_of_range, "batch = -3");
  bad([](AttnSplitShape& x) { x.context = -1; }, Errc::out_of_range, "context = -1");
  bad([](AttnSplitShape& x) { x.page_size = 0; }, Errc::out_of_range, "page_size = 0");
  bad([](AttnSplitShape& x) { x.layers = 0; }, Errc::out_of_range, "layers = 0");
  bad([](AttnSplitShape& x) { x.hidden = -7; }, Errc::out_of_range, "hidden = -7");
  bad([](AttnSplitShape& x) { x.format = KvFormat(9); }, Errc::invalid_value, "format = 9");
  bad([](AttnSplitShape& x) { x.context = int64_t{1} << 50; }, Errc::out_of_range, "context");
  expect_error(attn_split_cost(sh, AttnSplit(5), &c), Errc::invalid_value, {"split = 5"});
  expect_error(attn_split_capacity(sh, AttnSplit::batch, -1, &cap), Errc::out_of_range,
               {"kv_budget_bytes = -1"});
  sh.context = 0;
  expect_error(attn_split_capacity(sh, AttnSplit::batch, 1 << 30, &cap), Errc::out_of_range,
               {"context = 0"});
  EXPECT_STREQ(attn_split_name(AttnSplit::heads), "heads");
  EXPECT_STREQ(attn_split_name(AttnSplit::batch), "batch");
}

}  // namespace
}  // namespace mla::parallel
