// GPU tests of the token top-k (src/cuda/topk) against the CPU reference:
// the same int32 bytes (exact set, exact order) for every kernel and cluster
// size, both output orders, on adversarial rows (all equal, heavy ties at the
// threshold, -inf tails, NaN, one huge value, sorted and reverse-sorted,
// values packed into one radix bucket), rows of 1K to 1M logits, lengths
// below k, length 0, k 64 to 8192, the page-table translation; 100 calls in a
// row bit-identical. Outputs are poisoned before every run.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/random.hpp"
#include "cuda/topk/topk_cuda.hpp"
#include "gpu/gpu_buffer.hpp"
#include "mla/topk.hpp"

namespace mla {
namespace {

using testing::DeviceBuffer;
using testing::HostTensor;
using testing::Rng;
namespace tk = mla::cuda::topk;

// Every (kernel, cluster) pair that takes k and rows of n logits.
std::vector<tk::TopkPlan> plans_for(int k, int64_t n) {
  std::vector<tk::TopkPlan> v;
  for (tk::Kernel kern : tk::kKernels)
    if (k <= tk::max_k(kern))
      for (int cs : {1, 2, 4, 8})
        if (tk::fits(kern, n, cs)) v.push_back({kern, cs});
  return v;
}

std::string plan_name(tk::TopkPlan p) {
  return std::string(tk::kernel_name(p.kernel)) + " cluster " + std::to_string(p.cluster) +
         (p.l2_prefetch ? "" : " no-prefetch");
}

enum class Fill {
  uniform,       // [-10, 10)
  ties,          // 21 integer levels
  heavy_ties,    // 3 levels: most of the row ties at the threshold
  all_equal,     // one value
  one_bucket,    // [1, 1.0001): every logit in one 11-bit bucket
  sorted_up,     // ascending: every logit beats the ones before (compaction every chunk)
  sorted_down,   // descending
  neg_inf_tail,  // the second half -inf
  nan_mix,       // 30% NaN, 10% -inf, a few +inf, -0 and +0
  one_huge,      // one 1e30, the rest tiny
  gauss,         // smooth logits (sum of uniforms): the rank finish's usual case
  outliers,      // smooth logits and a far outlier every 5000 positions
  near_ties,     // smooth logits on a coarse grid: ties in bins the rank finish takes
};

const char* fill_name(Fill f) {
  switch (f) {
    case Fill::uniform: return "uniform";
    case Fill::ties: return "ties";
    case Fill::heavy_ties: return "heavy_ties";
    case Fill::all_equal: return "all_equal";
    case Fill::one_bucket: return "one_bucket";
    case Fill::sorted_up: return "sorted_up";
    case Fill::sorted_down: return "sorted_down";
    case Fill::neg_inf_tail: return "neg_inf_tail";
    case Fill::nan_mix: return "nan_mix";
    case Fill::one_huge: return "one_huge";
    case Fill::gauss: return "gauss";
    case Fill::outliers: return "outliers";
    case Fill::near_ties: return "near_ties";
  }
  return "?";
}

HostTensor make_logits(Rng& rng, int64_t R, int64_t N, Fill f) {
  HostTensor t(DType::f32, {R, N});
  for (int64_t r = 0; r < R; ++r)
    for (int64_t p = 0; p < N; ++p) {
      double v = rng.uniform(-10, 10);
      switch (f) {
        case Fill::uniform: break;
        case Fill::ties: v = std::round(v); break;
        case Fill::heavy_ties: v = std::round(v / 8); break;
        case Fill::all_equal: v = 0.5; break;
        case Fill::one_bucket: v = 1.0 + rng.uniform(0, 1e-4); break;
        case Fill::sorted_up: v = double(p) * 1e-3 - 7; break;
        case Fill::sorted_down: v = 7 - double(p) * 1e-3; break;
        case Fill::neg_inf_tail:
          if (p >= N / 2) v = -INFINITY;
          break;
        case Fill::nan_mix: {
          const int64_t m = rng.randint(0, 99);
          if (m < 30)
            v = NAN;
          else if (m < 40)
            v = -INFINITY;
          else if (m == 40)
            v = INFINITY;
          else if (m == 41)
            v = -0.0;
          else if (m == 42)
            v = 0.0;
          else if (m == 43)
            v = 1e-45;  // denormals: compared exactly (no flush to zero)
          else if (m == 44)
            v = -1e-45;
          break;
        }
        case Fill::one_huge: v = p == (r * 7919) % N ? 1e30 : rng.uniform(-1e-3, 1e-3); break;
        case Fill::gauss:
        case Fill::outliers:
        case Fill::near_ties:
          v = (v + rng.uniform(-10, 10) + rng.uniform(-10, 10)) / 3;
          if (f == Fill::outliers && p % 5000 == 3) v = 1e4;
          if (f == Fill::near_ties) v = std::round(v * 4096) / 4096;
          break;
      }
      t.set(r * N + p, v);
    }
  return t;
}

struct Case {
  int64_t R, N;
  int k;
  Fill fill;
  bool lengths = false;    // per-row lengths: 0, k/2, k, N, random
  bool translate = false;  // page-table transform (page 16, 2 rows per request when R is even)
};

// The reference's indices for `order`, and the GPU's for each plan, compared
// byte for byte.
void run_case(Rng& rng, const Case& c, const std::vector<tk::TopkPlan>& plans, bool with_auto) {
  const HostTensor logits = make_logits(rng, c.R, c.N, c.fill);
  HostTensor lens(DType::i32, {c.R});
  for (int64_t r = 0; r < c.R; ++r) {
    const int choice = int(r % 5);
    const int64_t len = choice == 0   ? 0
                        : choice == 1 ? std::min<int64_t>(c.N, c.k / 2)
                        : choice == 2 ? std::min<int64_t>(c.N, c.k)
                        : choice == 3 ? c.N
                                      : rng.randint(0, c.N);
    lens.set(r, double(c.lengths ? len : c.N));
  }
  const int page = 16, rpr = c.R % 2 == 0 ? 2 : 1;
  const int64_t B = c.R / rpr, maxp = (c.N + page - 1) / page;
  HostTensor bt(DType::i32, {B, maxp});
  for (int64_t i = 0; i < bt.numel(); ++i) bt.set(i, double(rng.randint(0, 5000)));
  DeviceBuffer dl(logits), dlen(lens), dbt(bt);
  for (TopkOrder order : {TopkOrder::best_first, TopkOrder::by_position}) {
    HostTensor ref(DType::i32, {c.R, c.k});
    ref.poison();
    TopkArgs a;
    a.logits = logits.view(), a.k = c.k, a.indices = ref.view(), a.order = order;
    if (c.lengths) a.lengths = lens.view();
    if (c.translate) a.block_table = bt.view(), a.page_size = page, a.rows_per_request = rpr;
    ASSERT_MLA_OK(topk_indices(a));
    HostTensor got = ref;
    DeviceBuffer dout(got);
    TopkArgs g = a;
    g.logits = dl.view(logits), g.indices = dout.view(got);
    if (c.lengths) g.lengths = dlen.view(lens);
    if (c.translate) g.block_table = dbt.view(bt);
    std::vector<std::string> runs;
    for (const tk::TopkPlan& plan : plans) runs.push_back(plan_name(plan));
    if (with_auto) runs.push_back("automatic");
    for (size_t i = 0; i < runs.size(); ++i) {
      dout.poison();
      if (i < plans.size())
        ASSERT_MLA_OK(cuda::topk_indices(g, {}, plans[i]));
      else
        ASSERT_MLA_OK(topk_indices(g));
      MLA_CUDA_CHECK(cudaDeviceSynchronize());
      dout.to_host(got);
      int64_t bad = 0;
      for (int64_t j = 0; j < ref.numel(); ++j)
        if (ref.get(j) != got.get(j) && bad++ < 3)
          ADD_FAILURE() << runs[i] << " " << fill_name(c.fill) << " R " << c.R << " N " << c.N
                        << " k " << c.k
                        << (order == TopkOrder::best_first ? " best_first" : " by_position")
                        << (c.lengths ? " lengths" : "") << (c.translate ? " translate" : "")
                        << ": row " << j / c.k << " entry " << j % c.k << " got " << got.get(j)
                        << " want " << ref.get(j);
      EXPECT_EQ(bad, 0);
    }
  }
}

constexpr Fill kAllFills[] = {
    Fill::uniform,   Fill::ties,        Fill::heavy_ties,   Fill::all_equal, Fill::one_bucket,
    Fill::sorted_up, Fill::sorted_down, Fill::neg_inf_tail, Fill::nan_mix,   Fill::one_huge,
    Fill::gauss,     Fill::outliers,    Fill::near_ties};

// Every fill on moderate rows, every kernel and cluster size.
TEST(TopkGpu, AdversarialRowsMatchReference) {
  Rng rng(1901);
  for (Fill f : kAllFills)
    run_case(rng, {5, 40000, 2048, f, true, false}, plans_for(2048, 40000), true);
}

// The rank finish on one CTA per row: every fill (the ones whose bins overflow
// take the select path), k 64 to 8192 (8192: the gathered entries may pass the
// streaming tiles' scratch), rows shorter than k, 128K rows with lengths.
TEST(TopkGpu, RankFinishMatchesReference) {
  Rng rng(1908);
  std::vector<tk::TopkPlan> plans;
  for (tk::Kernel kern : tk::kKernels) plans.push_back({kern, 1});
  for (Fill f : kAllFills) {
    run_case(rng, {3, 30000, 2048, f, true, false}, plans, false);
    run_case(rng, {2, 30000, 64, f, false, true}, plans, false);
  }
  for (Fill f : {Fill::uniform, Fill::gauss, Fill::near_ties, Fill::sorted_up})
    run_case(rng, {2, 131072, 8192, f, true, false}, {{tk::Kernel::select_1024, 1}}, false);
  run_case(rng, {4, 131072, 2048, Fill::gauss, true, true},
           {{tk::Kernel::select_1024, 1}, {tk::Kernel::select_512, 1}}, true);
  run_case(rng, {6, 1500, 2048, Fill::gauss, true, false}, plans, false);  // every row below k
}

// Rows of 1K to 256K (odd widths: rows not 16-byte aligned), k 64 to 8192,
// lengths, the page-table transform.
TEST(TopkGpu, ShapesMatchReference) {
  Rng rng(1902);
  const Case cases[] = {
      {7, 1000, 64, Fill::uniform, true, false},
      {4, 1024, 2048, Fill::ties, true, true},
      {5, 4099, 128, Fill::uniform, false, false},
      {6, 9000, 2048, Fill::ties, true, true},
      {3, 70001, 2048, Fill::uniform, true, true},
      {3, 40000, 8192, Fill::ties, true, false},
      {2, 65541, 4096, Fill::uniform, false, false},
      {2, 262144, 2048, Fill::uniform, false, false},
      {2, 100003, 8192, Fill::heavy_ties, false, false},
      {300, 3000, 512, Fill::uniform, true, true},
  };
  for (const Case& c : cases) run_case(rng, c, plans_for(c.k, c.N), true);
}

// One row of 1M logits (decode at batch 1): the cluster split, k 2048 and 8192.
TEST(TopkGpu, MillionLogitRow) {
  Rng rng(1903);
  run_case(rng, {1, 1 << 20, 2048, Fill::uniform, false, false}, plans_for(2048, 1 << 20), true);
  run_case(rng, {1, 1 << 20, 8192, Fill::ties, false, false}, plans_for(8192, 1 << 20), true);
  run_case(rng, {2, 1000003, 2048, Fill::sorted_up, false, false},
           {{tk::Kernel::select_1024, 8}, {tk::Kernel::select_512, 1}}, true);
}

// The sieve (streaming tiles): rows it takes (uniform, smooth, -inf tails,
// lengths), rows whose slices overflow or whose sample bound admits fewer
// than k (sorted rows, ties, one bucket: the chunk loop reruns the segment),
// the cluster split (each CTA's own sample), rows not 16-byte aligned, k 64
// to 4096.
TEST(TopkGpu, SieveMatchesReference) {
  Rng rng(1909);
  std::vector<tk::TopkPlan> plans;
  for (tk::Kernel kern : {tk::Kernel::select_1024, tk::Kernel::select_512})
    for (int cs : {1, 2, 8}) plans.push_back({kern, cs});
  plans.push_back({tk::Kernel::select_1024, 1, false});  // without the L2 prefetch
  plans.push_back({tk::Kernel::select_1024, 8, false});
  for (Fill f : kAllFills) run_case(rng, {3, 131072, 2048, f, true, false}, plans, false);
  run_case(rng, {4, 131075, 64, Fill::gauss, true, true}, plans, true);
  run_case(rng, {2, 262147, 4096, Fill::uniform, false, false}, plans, false);
  run_case(rng, {2, 200001, 1024, Fill::neg_inf_tail, false, false}, plans, false);
  // Many rows: the automatic plan (the 512-thread tile with the sieve, two CTAs
  // per SM), smooth rows and rows the sieve refuses, with lengths.
  run_case(rng, {300, 32768, 2048, Fill::gauss, true, false}, {{tk::Kernel::select_512, 1}}, true);
  run_case(rng, {300, 32771, 2048, Fill::sorted_up, false, true}, {{tk::Kernel::select_512, 1}},
           true);
}

// The resident kernel on many rows (more rows than resident CTAs, so a CTA
// takes several rows in turn): every fill (all equal, one bucket and heavy
// ties need the extra digit rounds over the resident keys), rows not 16-byte
// aligned, k 64, lengths, the transform.
TEST(TopkGpu, ResidentManyRowsMatchReference) {
  Rng rng(1906);
  const std::vector<tk::TopkPlan> plans = {
      {tk::Kernel::resident_512, 1}, {tk::Kernel::resident_512, 1}, {tk::Kernel::resident_512, 2}};
  for (Fill f : kAllFills) run_case(rng, {140, 32768, 2048, f, true, false}, plans, false);
  run_case(rng, {263, 20001, 2048, Fill::uniform, true, true}, plans, true);
  run_case(rng, {140, 36861, 64, Fill::ties, false, true}, {{tk::Kernel::resident_512, 1}}, true);
}

// Small shapes for compute-sanitizer (racecheck, memcheck, synccheck): every
// kernel, one CTA and a cluster per row, both orders, compactions
// (sorted_up), ties at the threshold, the transform.
TEST(TopkGpu, SmallForSanitizer) {
  Rng rng(1904);
  const std::vector<tk::TopkPlan> plans = {
      {tk::Kernel::select_1024, 1}, {tk::Kernel::select_1024, 4}, {tk::Kernel::select_512, 2},
      {tk::Kernel::select_256, 2},  {tk::Kernel::select_256, 1},  {tk::Kernel::resident_512, 1},
      {tk::Kernel::resident_512, 2}};
  // Lengths 0, k/2, k, N and random: every plan (compactions on sorted rows;
  // the sieve refuses them after its stream).
  run_case(rng, {5, 30000, 256, Fill::sorted_up, true, true}, plans, false);
  // The rank finish and the sieve on fewer plans (racecheck is slow): ties
  // (the rank finish refuses after its scan, the select path runs on the same
  // buffers), smooth rows (the rank finish and the sieve taken), outliers
  // (refused).
  const std::vector<tk::TopkPlan> fresh = {
      {tk::Kernel::select_1024, 1}, {tk::Kernel::select_1024, 4},  {tk::Kernel::select_512, 1},
      {tk::Kernel::select_256, 1},  {tk::Kernel::resident_512, 1}, {tk::Kernel::resident_512, 2}};
  run_case(rng, {4, 20001, 512, Fill::heavy_ties, true, false}, fresh, false);
  run_case(rng, {2, 30000, 256, Fill::gauss, false, false}, fresh, false);
  run_case(rng, {2, 20001, 512, Fill::outliers, false, false}, fresh, false);
  // More rows than resident CTAs: a CTA takes a second row after the first.
  run_case(rng, {140, 3001, 256, Fill::ties, true, false}, {{tk::Kernel::resident_512, 1}}, false);
  run_case(rng, {140, 3001, 256, Fill::gauss, true, false}, {{tk::Kernel::resident_512, 1}}, false);
}

// 100 calls of `plans` on R rows of N logits of `fill` (the last row a sawtooth)
// give the same bytes, both orders.
void expect_repeatable(Rng& rng, int64_t R, int64_t N, const std::vector<tk::TopkPlan>& plans,
                       Fill fill) {
  const int k = 2048;
  HostTensor logits = make_logits(rng, R, N, fill);
  for (int64_t p = 0; p < N; ++p) logits.set(R * N - N + p, double(p % 977));  // a sawtooth row
  DeviceBuffer dl(logits);
  HostTensor first(DType::i32, {R, k}), got(DType::i32, {R, k});
  for (const tk::TopkPlan& plan : plans)
    for (TopkOrder order : {TopkOrder::best_first, TopkOrder::by_position}) {
      DeviceBuffer dout(first);
      TopkArgs a;
      a.logits = dl.view(logits), a.k = k, a.indices = dout.view(first), a.order = order;
      for (int it = 0; it < 100; ++it) {
        dout.poison();
        ASSERT_MLA_OK(cuda::topk_indices(a, {}, plan));
        MLA_CUDA_CHECK(cudaDeviceSynchronize());
        dout.to_host(it == 0 ? first : got);
        if (it > 0)
          ASSERT_EQ(std::memcmp(first.storage.data(), got.storage.data(), size_t(R) * k * 4), 0)
              << plan_name(plan) << " call " << it;
      }
    }
}

// 100 calls in a row give the same bytes (ties at the threshold, a cluster
// split and a compaction-heavy row, both orders; the resident kernel with a
// CTA taking several rows in turn).
TEST(TopkGpu, RepeatedCallsBitIdentical) {
  Rng rng(1905);
  expect_repeatable(rng, 8, 131072,
                    {{tk::Kernel::select_1024, 4},
                     {tk::Kernel::select_512, 1},
                     {tk::Kernel::select_1024, 1},
                     {tk::Kernel::resident_512, 4}},
                    Fill::ties);
  expect_repeatable(rng, 8, 131072, {{tk::Kernel::select_1024, 1}, {tk::Kernel::select_1024, 4}},
                    Fill::gauss);
  expect_repeatable(rng, 300, 32768, {{tk::Kernel::resident_512, 1}, {tk::Kernel::select_512, 1}},
                    Fill::ties);
  expect_repeatable(rng, 300, 32768, {{tk::Kernel::resident_512, 1}, {tk::Kernel::select_512, 1}},
                    Fill::gauss);
}

TEST(TopkGpu, RejectsWhatAKernelCannotTake) {
  HostTensor logits(DType::f32, {2, 100});
  HostTensor idx(DType::i32, {2, 8192});
  DeviceBuffer dl(logits), dout(idx);
  TopkArgs a;
  a.logits = dl.view(logits), a.k = 8192, a.indices = dout.view(idx);
  Status st = cuda::topk_indices(a, {}, {tk::Kernel::select_512, 1});
  EXPECT_EQ(st.code(), Errc::invalid_value) << st.to_string();
  EXPECT_NE(st.message().find("8192"), std::string::npos) << st.message();
  a.k = 2048;
  HostTensor wide(DType::f32, {2, 40000});
  DeviceBuffer dw(wide);
  a.logits = dw.view(wide);
  st = cuda::topk_indices(a, {}, {tk::Kernel::resident_512, 1});  // 40000 logits per CTA
  EXPECT_EQ(st.code(), Errc::invalid_value) << st.to_string();
  EXPECT_NE(st.message().find("N = 40000"), std::string::npos) << st.message();
  a.logits = dl.view(logits), a.k = 8192;
  st = cuda::topk_indices(a, {}, {tk::Kernel::select_1024, 3});
  EXPECT_EQ(st.code(), Errc::invalid_value) << st.to_string();
  EXPECT_NE(st.message().find("cluster = 3"), std::string::npos) << st.message();
  a.order = static_cast<TopkOrder>(7);
  st = topk_indices(a);
  EXPECT_EQ(st.code(), Errc::invalid_value) << st.to_string();
  EXPECT_NE(st.message().find("order = 7"), std::string::npos) << st.message();
}

// The plan: two rows per SM whose segments the sieve takes run the 512-thread
// streaming tile; else rows that fill the GPU and fit one CTA's shared memory
// run the resident kernel, one CTA per row; otherwise (never a resident
// cluster) rows that fill the GPU run one streaming CTA each, and few long rows
// are split.
TEST(TopkGpu, ChooseSplitsFewLongRows) {
  EXPECT_EQ(tk::choose(4096, 32768, 2048, 132).kernel, tk::Kernel::select_512);
  EXPECT_EQ(tk::choose(4096, 65536, 2048, 132).kernel, tk::Kernel::select_512);
  EXPECT_EQ(tk::choose(4096, 65536, 2048, 132).cluster, 1);
  EXPECT_EQ(tk::choose(4096, 131072, 2048, 132).kernel, tk::Kernel::select_1024);
  EXPECT_EQ(tk::choose(4096, 131072, 2048, 132).cluster, 1);
  EXPECT_EQ(tk::choose(4096, 8192, 2048, 132).kernel,
            tk::Kernel::resident_512);  // too short to sieve
  EXPECT_EQ(tk::choose(200, 32768, 2048, 132).kernel, tk::Kernel::resident_512);  // < 2 rows per SM
  EXPECT_TRUE(tk::sieve_takes(tk::Kernel::select_1024, 131072, 1, 2048));
  EXPECT_TRUE(tk::sieve_takes(tk::Kernel::select_1024, 1 << 20, 8, 2048));
  EXPECT_FALSE(tk::sieve_takes(tk::Kernel::select_256, 32768, 1, 2048));    // no room to gather
  EXPECT_FALSE(tk::sieve_takes(tk::Kernel::select_1024, 131072, 1, 8192));  // slices too full
  EXPECT_FALSE(tk::sieve_takes(tk::Kernel::resident_512, 32768, 1, 2048));
  EXPECT_EQ(tk::choose(128, 131072, 2048, 132).kernel, tk::Kernel::select_1024);
  EXPECT_EQ(tk::choose(128, 131072, 2048, 132).cluster, 1);
  EXPECT_EQ(tk::choose(128, 32768, 2048, 132).kernel, tk::Kernel::select_1024);
  EXPECT_EQ(tk::choose(132, 36861, 2048, 132).kernel, tk::Kernel::resident_512);
  EXPECT_EQ(tk::choose(132, 36862, 2048, 132).kernel, tk::Kernel::select_1024);
  EXPECT_EQ(tk::choose(8, 131072, 2048, 132).kernel, tk::Kernel::select_1024);
  // The L2 prefetch where CTAs stream several rows or a row is split, not one row per CTA.
  EXPECT_TRUE(tk::choose(4096, 32768, 2048, 132).l2_prefetch);
  EXPECT_TRUE(tk::choose(4096, 131072, 2048, 132).l2_prefetch);
  EXPECT_TRUE(tk::choose(1, 1 << 20, 2048, 132).l2_prefetch);
  EXPECT_FALSE(tk::choose(128, 131072, 2048, 132).l2_prefetch);
  EXPECT_FALSE(tk::choose(128, 32768, 2048, 132).l2_prefetch);
  EXPECT_FALSE(tk::choose(64, 32768, 2048, 132).l2_prefetch);
  EXPECT_TRUE(tk::choose(16, 65536, 2048, 132).l2_prefetch);  // few CTAs: it pays again
  EXPECT_TRUE(tk::fits(tk::Kernel::resident_512, 36861, 1));
  EXPECT_FALSE(tk::fits(tk::Kernel::resident_512, 36862, 1));
  EXPECT_EQ(tk::choose(4096, 32768, 4096, 132).kernel, tk::Kernel::select_512);
  EXPECT_EQ(tk::choose(4096, 32768, 2048, 132).cluster, 1);
  EXPECT_EQ(tk::choose(4096, 32768, 8192, 132).kernel, tk::Kernel::select_1024);
  EXPECT_EQ(tk::choose(1, 1 << 20, 2048, 132).cluster, 8);
  EXPECT_EQ(tk::choose(1, 4096, 2048, 132).cluster, 1);  // too short to split
  // The DSA decode step's shapes (B 4-128 rows, 4K-32K): rows the sieve does not
  // take on the resident kernel, and no row under kSplitFrom split.
  for (int64_t rows : {4, 16, 64, 128}) {
    EXPECT_EQ(tk::choose(rows, 8192, 2048, 132).kernel, tk::Kernel::resident_512) << rows;
    for (int64_t width : {16384, 32768}) {
      EXPECT_EQ(tk::choose(rows, width, 2048, 132).kernel, tk::Kernel::select_1024) << rows;
      EXPECT_EQ(tk::choose(rows, width, 2048, 132).cluster, 1) << rows << " x " << width;
    }
  }
  EXPECT_EQ(tk::choose(4, 65536, 2048, 132).cluster, 1);
  EXPECT_EQ(tk::choose(8, 131072, 2048, 132).cluster, 4);  // long rows still split
  EXPECT_EQ(tk::choose(16, 131072, 2048, 132).cluster, 4);
  EXPECT_EQ(tk::choose(1, 262144, 2048, 132).cluster, 8);
  EXPECT_EQ(tk::choose(16, 262144, 2048, 132).cluster, 4);  // no more than 4 past 8 rows
  EXPECT_EQ(tk::choose(64, 131072, 2048, 132).cluster, 2);
}

}  // namespace
}  // namespace mla
