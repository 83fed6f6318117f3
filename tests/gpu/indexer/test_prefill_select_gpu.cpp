// GPU tests of the prefill select (src/cuda/indexer/indexer_select.hpp): the
// indexer's prefill logits followed by the top-k of every row, unfused and
// fused (the candidate sink, its buffers and the unfused fallback for rows
// that overflow), against the CPU reference top-k over the same logits.
//
// The reference logits. On "exact" inputs (e4m3 codes in {0, +-1, +-2}, weights
// that are multiples of 2^-4 in [-0.5, 0.5], power-of-two key scales) every
// partial sum is exact in fp32 and in the wgmma's ~14-bit accumulator, so the
// CPU reference indexer (fp64) gives the GPU's logits bit for bit (checked),
// and the expected lists are the CPU reference's indexer + top-k. On random
// inputs the GPU rounds differently from fp64 (mla/indexer.hpp), so the
// expected lists are the CPU reference top-k over the GPU indexer's own logits
// (the unfused kernel; the fused kernel shares its math). Either way the
// selects must give the same lists bit for bit: the same set, the same order
// (best first, ties lower position first; or ascending position), -1 padding
// for rows with fewer than k candidates. Outputs poisoned before every run.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "common/random.hpp"
#include "cuda/indexer/indexer_cuda.hpp"
#include "cuda/indexer/indexer_select.hpp"
#include "gpu/gpu_buffer.hpp"
#include "mla/indexer.hpp"
#include "mla/topk.hpp"

namespace mla {
namespace {

using cuda::indexer::PrefillSelectParams;
using cuda::indexer::SelectOptions;
using cuda::indexer::SelectPath;
using cuda::indexer::SelectStats;
using testing::DeviceBuffer;
using testing::HostTensor;
using testing::random_tensor;
using testing::Rng;

enum class Data { exact, random };
// causal: the last T tokens of an N-token prompt; ranges: random ranges (an
// eighth empty, an eighth shorter than 40 keys: rows with fewer than k candidates).
enum class Ranges { causal, random };

struct SelectCase {
  HostTensor q8, w, k8, ks, kst, ken;
  std::string name;
};

// Keys at positions p % 5 == 0 (p >= 64) repeat the key 37 positions earlier,
// scale included: equal logits at different positions for every query (ties).
SelectCase make_case(Rng& rng, int T, int N, Data data, Ranges ranges) {
  SelectCase c;
  c.name = std::string(data == Data::exact ? "exact" : "random") +
           (ranges == Ranges::causal ? " causal " : " ranges ") + std::to_string(T) + "x" +
           std::to_string(N);
  c.q8 = HostTensor(DType::e4m3, {T, 64, 128});
  c.k8 = HostTensor(DType::e4m3, {N, 128});
  c.w = HostTensor(DType::f32, {T, 64});
  c.ks = HostTensor(DType::f32, {N});
  if (data == Data::exact) {
    for (int64_t i = 0; i < c.q8.numel(); ++i) c.q8.set(i, double(rng.randint(-2, 2)));
    for (int64_t i = 0; i < c.k8.numel(); ++i) c.k8.set(i, double(rng.randint(-2, 2)));
    for (int64_t i = 0; i < c.w.numel(); ++i) c.w.set(i, double(rng.randint(-8, 8)) / 16);
  } else {
    c.q8 = random_tensor(rng, DType::e4m3, {T, 64, 128}, -448, 448);
    c.k8 = random_tensor(rng, DType::e4m3, {N, 128}, -448, 448);
    c.w = random_tensor(rng, DType::f32, {T, 64}, -1, 1);
  }
  for (int64_t i = 0; i < N; ++i) c.ks.set(i, std::ldexp(1.0, int(rng.randint(-12, -4))));
  for (int64_t p = 65; p < N; p += 5) {
    for (int d = 0; d < 128; ++d) c.k8.set(p * 128 + d, c.k8.get((p - 37) * 128 + d));
    c.ks.set(p, c.ks.get(p - 37));
  }
  c.kst = HostTensor(DType::i32, {T}), c.ken = HostTensor(DType::i32, {T});
  for (int t = 0; t < T; ++t) {
    int64_t a = 0, b = int64_t(N) - T + t + 1;
    if (ranges == Ranges::random) {
      a = rng.randint(0, N), b = rng.randint(0, N);
      if (t % 8 == 3) b = a;                                 // empty
      if (t % 8 == 5) b = std::min<int64_t>(N, a + t % 40);  // short
    }
    c.kst.set(t, double(std::min(a, b))), c.ken.set(t, double(std::max(a, b)));
  }
  return c;
}

struct Device {
  DeviceBuffer q8, w, k8, ks, kst, ken;
  explicit Device(const SelectCase& c)
      : q8(c.q8), w(c.w), k8(c.k8), ks(c.ks), kst(c.kst), ken(c.ken) {}
  PrefillSelectParams params(int k, int32_t* out, bool best_first, int64_t T, int64_t N) const {
    PrefillSelectParams p;
    p.idx.q = static_cast<const uint8_t*>(q8.get());
    p.idx.w = static_cast<const float*>(w.get());
    p.idx.flat_keys = static_cast<const uint8_t*>(k8.get());
    p.idx.flat_scales = static_cast<const float*>(ks.get());
    p.idx.ks = static_cast<const int32_t*>(kst.get());
    p.idx.ke = static_cast<const int32_t*>(ken.get());
    p.idx.num_keys = N, p.idx.num_tokens = T;
    p.k = k, p.out = out, p.out_stride = k, p.best_first = best_first;
    return p;
  }
};

// The expected logits (see the top of the file).
HostTensor expected_logits(const SelectCase& c, Data data, const Device& d) {
  const int64_t T = c.q8.shape[0], N = c.k8.shape[0];
  HostTensor gpu(DType::f32, {T, N});
  DeviceBuffer dl(gpu);
  dl.poison();
  EXPECT_TRUE(cuda::indexer_logits_prefill(
                  {d.q8.view(c.q8), d.w.view(c.w), d.k8.view(c.k8), d.ks.view(c.ks),
                   d.kst.view(c.kst), d.ken.view(c.ken), dl.view(gpu)},
                  {})
                  .ok());
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  dl.to_host(gpu);
  if (data == Data::exact) {
    HostTensor ref(DType::f32, {T, N});
    ref.poison();
    EXPECT_TRUE(indexer_logits_prefill({c.q8.view(), c.w.view(), c.k8.view(), c.ks.view(),
                                        c.kst.view(), c.ken.view(), ref.view()})
                    .ok());
    int64_t differ = 0;  // by value: a +0 / -0 difference would not change any list
    for (int64_t i = 0; i < T * N; ++i) differ += ref.get(i) != gpu.get(i);
    EXPECT_EQ(differ, 0) << c.name
                         << ": exact inputs, yet the GPU logits differ from the CPU reference's";
    return ref;
  }
  return gpu;
}

HostTensor reference_lists(const HostTensor& logits, int k, bool best_first) {
  HostTensor ref(DType::i32, {logits.shape[0], k});
  ref.poison();
  TopkArgs a;
  a.logits = logits.view(), a.k = k, a.indices = ref.view();
  a.order = best_first ? TopkOrder::best_first : TopkOrder::by_position;
  EXPECT_TRUE(topk_indices(a).ok());
  return ref;
}

// One select call into a poisoned output; returns the lists.
HostTensor run_select(const SelectCase& c, const Device& d, int k, bool best_first,
                      const SelectOptions& opt, SelectStats* stats) {
  const int64_t T = c.q8.shape[0], N = c.k8.shape[0];
  HostTensor got(DType::i32, {T, k});
  DeviceBuffer dout(got);
  dout.poison();
  const PrefillSelectParams p = d.params(k, static_cast<int32_t*>(dout.get()), best_first, T, N);
  const size_t bytes = cuda::indexer::prefill_select_workspace(p, opt);
  DeviceBuffer ws(bytes);
  cudaMemset(ws.get(), 0xff, bytes);  // poisoned scratch
  const Status st = cuda::indexer::prefill_select(p, opt, ws.get(), bytes, nullptr, stats);
  EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  dout.to_host(got);
  return got;
}

void expect_same_lists(const HostTensor& ref, const HostTensor& got, const std::string& what) {
  const int64_t k = ref.shape[1];
  int64_t bad = 0;
  for (int64_t j = 0; j < ref.numel(); ++j)
    if (ref.get(j) != got.get(j) && bad++ < 3)
      ADD_FAILURE() << what << ": row " << j / k << " entry " << j % k << " got " << got.get(j)
                    << " want " << ref.get(j);
  EXPECT_EQ(bad, 0) << what;
}

struct Run {
  SelectPath path;
  int64_t capacity;       // 0: the default
  int64_t fallback_rows;  // 0: the default
  cuda::indexer::CandidateTopk how = cuda::indexer::CandidateTopk::resident;
};

// Every run on both orders against the reference; returns the fused runs'
// overflowed rows (summed).
int64_t check_case(const SelectCase& c, Data data, int k, std::initializer_list<Run> runs) {
  const Device d(c);
  const HostTensor logits = expected_logits(c, data, d);
  int64_t overflow = 0;
  for (bool best_first : {true, false}) {
    const HostTensor ref = reference_lists(logits, k, best_first);
    for (const Run& r : runs) {
      SelectOptions opt;
      opt.path = r.path, opt.capacity = r.capacity, opt.fallback_rows = r.fallback_rows;
      opt.candidate_topk = r.how;
      SelectStats stats;
      const HostTensor got = run_select(c, d, k, best_first, opt, &stats);
      const std::string what = c.name + " k " + std::to_string(k) + " " +
                               cuda::indexer::select_path_name(r.path) + " capacity " +
                               std::to_string(r.capacity) +
                               (best_first ? " best_first" : " by_position") + " (" +
                               std::to_string(stats.overflow_rows) + " rows overflowed)";
      expect_same_lists(ref, got, what);
      overflow += stats.overflow_rows;
    }
  }
  return overflow;
}

TEST(IndexerGpu, PrefillSelectMatchesReference) {
  Rng rng(1901);
  // Exact inputs: the CPU reference's indexer + top-k. Causal rows (ties from
  // repeated keys, token counts off the CTA's 8), then random ranges (empty
  // rows, rows shorter than k).
  {
    const SelectCase c = make_case(rng, 45, 1500, Data::exact, Ranges::causal);
    for (int k : {64, 256})
      check_case(
          c, Data::exact, k,
          {{SelectPath::unfused, 0, 0}, {SelectPath::fused, 0, 0}, {SelectPath::fused, 1024, 0}});
  }
  {
    const SelectCase c = make_case(rng, 37, 900, Data::exact, Ranges::random);
    check_case(c, Data::exact, 128, {{SelectPath::unfused, 0, 0}, {SelectPath::fused, 0, 0}});
  }
  // Rows enough to fill the GPU: the top-k over the buffers runs on the
  // resident kernel (fewer rows take topk::choose's plan).
  {
    const SelectCase c = make_case(rng, 200, 3000, Data::random, Ranges::causal);
    check_case(c, Data::random, 64,
               {{SelectPath::unfused, 0, 0},
                {SelectPath::fused, 0, 0},
                {SelectPath::fused, 1024, 0},
                {SelectPath::fused, 0, 0, cuda::indexer::CandidateTopk::choose}});
  }
  // Random inputs at k 2048: rows of ~5000 keys, the bound set from the 32nd
  // tile on; a capacity of 3072 may overflow some rows (then exact through
  // the fallback).
  {
    const SelectCase c = make_case(rng, 67, 5000, Data::random, Ranges::causal);
    check_case(
        c, Data::random, 2048,
        {{SelectPath::unfused, 0, 0}, {SelectPath::fused, 0, 0}, {SelectPath::fused, 3072, 16}});
  }
}

// The bound prunes: 20000-key rows at k 256 keep about k (1 + ln(N / k)) ~ 1400
// entries plus the bins' slack, well inside 16k = 4096; a bound that never
// rose would keep all 20000 and overflow every row.
TEST(IndexerGpu, PrefillSelectBoundPrunes) {
  Rng rng(1902);
  const SelectCase c = make_case(rng, 40, 20000, Data::random, Ranges::causal);
  const int64_t overflow = check_case(c, Data::random, 256, {{SelectPath::fused, 4096, 0}});
  EXPECT_EQ(overflow, 0) << "the candidate bound did not prune";
}

// Forced overflow: capacity k on rows of up to 1500 keys: most rows overflow and
// go through the unfused fallback in chunks of 7 rows; still exact.
TEST(IndexerGpu, PrefillSelectOverflowFallsBack) {
  Rng rng(1903);
  const SelectCase c = make_case(rng, 45, 1500, Data::exact, Ranges::causal);
  const int64_t overflow = check_case(c, Data::exact, 64, {{SelectPath::fused, 64, 7}});
  EXPECT_GT(overflow, 40) << "the forced overflow did not happen";
}

// 100 calls of the fused path bit-identical (the candidate buffers depend on
// integer counts at fixed tiles only; the fallback's rows come in any order).
TEST(IndexerGpu, PrefillSelectRepeatable) {
  Rng rng(1904);
  const SelectCase c = make_case(rng, 67, 5000, Data::random, Ranges::causal);
  const Device d(c);
  for (int64_t cap : {int64_t(0), int64_t(1100)}) {  // 1100: some rows take the fallback
    SelectOptions opt;
    opt.path = SelectPath::fused, opt.capacity = cap, opt.fallback_rows = 5;
    SelectStats stats;
    const HostTensor first = run_select(c, d, 256, true, opt, &stats);
    for (int r = 0; r < 99; ++r) {
      const HostTensor again = run_select(c, d, 256, true, opt, &stats);
      ASSERT_EQ(std::memcmp(first.storage.data(), again.storage.data(), size_t(first.numel()) * 4),
                0)
          << "capacity " << cap << ": call " << r + 2 << " differs from the first";
    }
  }
}

// Few launches (the one compute-sanitizer runs): the fused path with pruning
// and a few overflowed rows.
TEST(IndexerGpu, PrefillSelectSmall) {
  Rng rng(1905);
  const SelectCase c = make_case(rng, 13, 700, Data::exact, Ranges::causal);
  check_case(c, Data::exact, 64, {{SelectPath::fused, 256, 4}});
}

}  // namespace
}  // namespace mla
