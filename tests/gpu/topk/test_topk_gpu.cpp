// GPU tests of top-k (src/cuda/dsa/topk.cu) against the CPU reference:
// identical lists for every kernel version, any cluster split, ties, -inf/NaN,
// lengths, block-table translation. Fresh random inputs, outputs poisoned.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "common/random.hpp"
#include "cuda/dsa/topk_cuda.hpp"
#include "cuda/dsa/topk_launch.hpp"
#include "gpu/gpu_buffer.hpp"
#include "mla/topk.hpp"

namespace mla {
namespace {

using testing::DeviceBuffer;
using testing::HostTensor;
using testing::random_tensor;
using testing::Rng;
namespace dsa = mla::cuda::dsa;

bool same_bytes(const HostTensor& a, const HostTensor& b) {
  const size_t n = size_t(a.numel()) * dtype_size(a.dtype);
  return std::memcmp(a.storage.data(), b.storage.data(), n) == 0;
}

// The top-k versions a test runs: `all`, or only MLA_TEST_TOPK_ALGO when set
// (compute-sanitizer runs force one version at a time; a test left with none
// fails rather than passing empty).
std::vector<int> topk_algos(std::initializer_list<int> all) {
  const char* env = std::getenv("MLA_TEST_TOPK_ALGO");
  if (env == nullptr) return std::vector<int>(all);
  std::vector<int> v;
  for (int a : all)
    if (a == std::atoi(env)) v.push_back(a);
  EXPECT_FALSE(v.empty()) << "MLA_TEST_TOPK_ALGO=" << env << " is not among this test's versions";
  return v;
}

// ties: 21 levels (many equal keys); heavy_ties: 3 levels (more ties than
// the sort buffer's slack: the ordered fallback). algo: TopkParams::algo.
void run_topk_case(Rng& rng, int R, int N, int k, int cluster, bool ties, bool translate,
                   bool heavy_ties = false, int algo = 2) {
  HostTensor logits = random_tensor(rng, DType::f32, {R, N}, -10, 10);
  for (int64_t i = 0; i < logits.numel(); ++i) {
    if (ties) logits.set(i, std::round(logits.get(i)));
    if (heavy_ties) logits.set(i, std::round(logits.get(i) / 8));
    const int64_t m = rng.randint(0, 99);
    if (m == 0) logits.set(i, -INFINITY);
    if (m == 1) logits.set(i, NAN);
    if (m == 2) logits.set(i, -0.0);
    if (m == 3) logits.set(i, 0.0);
  }
  HostTensor lens(DType::i32, {R});
  for (int r = 0; r < R; ++r) {
    const int choice = r % 5;
    lens.set(r, choice == 0   ? 0
                : choice == 1 ? std::min(N, k / 2)
                : choice == 2 ? std::min(N, k)
                : choice == 3 ? N
                              : int(rng.randint(0, N)));
  }
  const int page = 16, rpr = R % 2 == 0 ? 2 : 1, B = R / rpr, maxp = (N + page - 1) / page;
  HostTensor bt(DType::i32, {B, maxp});
  for (int64_t i = 0; i < bt.numel(); ++i) bt.set(i, double(rng.randint(0, 5000)));
  HostTensor ref(DType::i32, {R, k});
  ref.poison();
  HostTensor got = ref;
  TopkArgs a;
  a.logits = logits.view(), a.lengths = lens.view(), a.k = k, a.indices = ref.view();
  if (translate) a.block_table = bt.view(), a.page_size = page, a.rows_per_request = rpr;
  ASSERT_MLA_OK(topk_indices(a));
  DeviceBuffer dl(logits), dlen(lens), dbt(bt), dout(got);
  dout.poison();
  dsa::TopkParams p;
  p.logits = static_cast<const float*>(dl.get()), p.logits_stride = N, p.num_rows = R, p.width = N,
  p.k = k;
  p.lengths = static_cast<const int32_t*>(dlen.get());
  if (translate)
    p.block_table = static_cast<const int32_t*>(dbt.get()), p.block_table_stride = maxp,
    p.page_size = page, p.rows_per_request = rpr;
  p.out = static_cast<int32_t*>(dout.get()), p.out_stride = k, p.cluster = cluster, p.algo = algo;
  ASSERT_MLA_OK(dsa::launch_topk(p, nullptr));
  MLA_CUDA_CHECK(cudaDeviceSynchronize());
  dout.to_host(got);
  int64_t bad = 0;
  for (int64_t i = 0; i < ref.numel(); ++i)
    if (ref.get(i) != got.get(i) && bad++ < 5)
      ADD_FAILURE() << "algo " << algo << " R " << R << " N " << N << " k " << k << " cluster "
                    << cluster << " ties " << ties << ": row " << i / k << " entry " << i % k
                    << " got " << got.get(i) << " want " << ref.get(i);
  EXPECT_EQ(bad, 0);
}

// Every kernel (algo 3, 2 and 1) on the same cases.
TEST(DsaGpu, TopkMatchesReferenceExactly) {
  for (int algo : topk_algos({4, 3, 2, 1})) {
    Rng rng(105);
    for (int cluster : {1, 2, 4, 8}) {
      run_topk_case(rng, 7, 5000, 64, cluster, false, false, false, algo);
      run_topk_case(rng, 6, 9000, 2048, cluster, true, true, false, algo);
      run_topk_case(rng, 3, 70000, 2048, cluster, false, true, false,
                    algo);  // candidates overflow shared memory? checked both ways
      run_topk_case(rng, 3, 40000, 8192, cluster, true, false, false, algo);
      run_topk_case(rng, 5, 4099, 128, cluster, false, false, false,
                    algo);  // odd rows: unaligned vectors
      run_topk_case(rng, 4, 20001, 2048, cluster, false, true, true, algo);
      // 30% of the row on one value: more than any pool holds (algo 2 and 3 fall back)
      run_topk_case(rng, 2, 60000, 2048, cluster, false, false, true, algo);
    }
    run_topk_case(rng, 300, 3000, 512, 0, false, true, false, algo);  // automatic cluster choice
  }
}

// algo 2 and 3 on the benchmark's data (uniform logits in [-1, 1), 1/32 of a
// row in the top 12-bit bucket: the pool paths, no fallback), one and several CTAs
// per row, rows long enough for many ring chunks per CTA and a row stride
// that is not a multiple of 4 floats.
TEST(DsaGpu, TopkStreamingPoolMatchesReference) {
  Rng rng(107);
  for (const auto& [R, N, k, cluster] : {std::array<int, 4>{4, 131072, 2048, 2},
                                         {3, 131071, 2048, 1},
                                         {2, 262144, 2048, 8},
                                         {5, 65541, 4096, 4},
                                         {2, 100000, 64, 2}}) {
    HostTensor logits = random_tensor(rng, DType::f32, {R, N}, -1, 1);
    HostTensor ref(DType::i32, {R, k});
    ref.poison();
    HostTensor got = ref;
    TopkArgs a;
    a.logits = logits.view(), a.k = k, a.indices = ref.view();
    ASSERT_MLA_OK(topk_indices(a));
    for (int algo : topk_algos({2, 3, 4})) {
      DeviceBuffer dl(logits), dout(got);
      dout.poison();
      dsa::TopkParams p;
      p.logits = static_cast<const float*>(dl.get()), p.logits_stride = N, p.num_rows = R,
      p.width = N, p.k = k;
      p.out = static_cast<int32_t*>(dout.get()), p.out_stride = k, p.cluster = cluster;
      p.algo = algo;
      ASSERT_MLA_OK(dsa::launch_topk(p, nullptr));
      MLA_CUDA_CHECK(cudaDeviceSynchronize());
      dout.to_host(got);
      EXPECT_TRUE(same_bytes(ref, got))
          << "algo " << algo << " R " << R << " N " << N << " k " << k << " cluster " << cluster;
    }
  }
}

TEST(DsaGpu, TopkCandidateOverflowFallsBackCorrectly) {
  // Every logit in one 12-bit bucket (values in [1, 1.0001)): the candidate
  // buffer overflows and later rounds re-read the row.
  Rng rng(106);
  const int R = 2, N = 60000, k = 1024;
  HostTensor logits(DType::f32, {R, N});
  for (int64_t i = 0; i < logits.numel(); ++i) logits.set(i, 1.0 + rng.uniform(0, 1e-4));
  HostTensor ref(DType::i32, {R, k});
  HostTensor got = ref;
  TopkArgs a;
  a.logits = logits.view(), a.k = k, a.indices = ref.view();
  ASSERT_MLA_OK(topk_indices(a));
  for (int algo : topk_algos({4, 3, 2, 1}))  // algo 2 falls back to algo 1 here (3, 4 need not)
    for (int cluster : {1, 4}) {
      DeviceBuffer dl(logits), dout(got);
      dout.poison();
      dsa::TopkParams p;
      p.logits = static_cast<const float*>(dl.get()), p.logits_stride = N, p.num_rows = R,
      p.width = N, p.k = k;
      p.out = static_cast<int32_t*>(dout.get()), p.out_stride = k, p.cluster = cluster,
      p.algo = algo;
      ASSERT_MLA_OK(dsa::launch_topk(p, nullptr));
      MLA_CUDA_CHECK(cudaDeviceSynchronize());
      dout.to_host(got);
      EXPECT_TRUE(same_bytes(ref, got)) << "algo " << algo << " cluster " << cluster;
    }
}

TEST(DsaGpu, TopkRejectsBadK) {
  dsa::TopkParams p;
  p.num_rows = 1, p.k = 100;
  Status st = dsa::launch_topk(p, nullptr);
  EXPECT_EQ(st.code(), Errc::invalid_value) << st.to_string();
  EXPECT_NE(st.message().find("100"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace mla
