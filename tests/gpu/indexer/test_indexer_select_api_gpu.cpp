// GPU tests of the public prefill select (mla/indexer_select.hpp) on CUDA
// tensors: every path (automatic, unfused, fused, fused with a capacity of k
// so that rows overflow into the fallback) and both orders give the CPU
// entry's lists bit for bit, and automatic gives unfused's. The inputs are
// "exact" (e4m3 codes in {0, +-1, +-2}, weights in 2^-4 steps, power-of-two
// key scales: every partial sum is exact in fp32 and in the wgmma's
// accumulator, so the GPU logits are the CPU reference's; the kernel-level
// test test_prefill_select_gpu.cpp checks that), so the CPU entry is the
// reference. Outputs and workspaces poisoned before every run. The workspace
// is sized by indexer_select_prefill_workspace_size; the checked mode names a
// bad k_end read back from the device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/random.hpp"
#include "gpu/gpu_buffer.hpp"
#include "mla/indexer_select.hpp"

namespace mla {
namespace {

using testing::DeviceBuffer;
using testing::HostTensor;
using testing::Rng;

struct Inputs {
  HostTensor q8, w, k8, ks, kst, ken;
  Inputs(int T, int N, uint64_t seed) {
    Rng rng(seed);
    q8 = HostTensor(DType::e4m3, {T, 64, 128}), k8 = HostTensor(DType::e4m3, {N, 128});
    w = HostTensor(DType::f32, {T, 64}), ks = HostTensor(DType::f32, {N});
    for (int64_t i = 0; i < q8.numel(); ++i) q8.set(i, double(rng.randint(-2, 2)));
    for (int64_t i = 0; i < k8.numel(); ++i) k8.set(i, double(rng.randint(-2, 2)));
    for (int64_t i = 0; i < w.numel(); ++i) w.set(i, double(rng.randint(-8, 8)) / 16);
    for (int64_t i = 0; i < N; ++i) ks.set(i, std::ldexp(1.0, int(rng.randint(-12, -4))));
    kst = HostTensor(DType::i32, {T}), ken = HostTensor(DType::i32, {T});
    for (int t = 0; t < T; ++t) {  // causal rows, then random ranges (empty, short, at N)
      int64_t a = 0, b = int64_t(N) - T + t + 1;
      if (t % 2) a = rng.randint(0, N), b = rng.randint(0, N);
      if (t % 8 == 3) b = a;
      if (t % 8 == 5) b = std::min<int64_t>(N, a + t % 40);
      if (t % 16 == 7) b = N;
      kst.set(t, double(std::min(a, b))), ken.set(t, double(std::max(a, b)));
    }
  }
};

struct OnDevice {
  DeviceBuffer q8, w, k8, ks, kst, ken;
  explicit OnDevice(const Inputs& c)
      : q8(c.q8), w(c.w), k8(c.k8), ks(c.ks), kst(c.kst), ken(c.ken) {}
};

IndexerSelectPrefillArgs cpu_args(const Inputs& c, int32_t k, TopkOrder order, HostTensor& out) {
  return {c.q8.view(),  c.w.view(), c.k8.view(), c.ks.view(), c.kst.view(),
          c.ken.view(), k,          order,       out.view()};
}

HostTensor run_gpu(const Inputs& c, const OnDevice& d, int32_t k, TopkOrder order,
                   const IndexerSelectOptions& o, const ExecContext& ctx = {},
                   Status* status = nullptr) {
  HostTensor got(DType::i32, {c.q8.shape[0], k});
  DeviceBuffer dout(got);
  dout.poison();
  const IndexerSelectPrefillArgs a{d.q8.view(c.q8),
                                   d.w.view(c.w),
                                   d.k8.view(c.k8),
                                   d.ks.view(c.ks),
                                   d.kst.view(c.kst),
                                   d.ken.view(c.ken),
                                   k,
                                   order,
                                   dout.view(got)};
  size_t bytes = 0;
  EXPECT_TRUE(indexer_select_prefill_workspace_size(a, o, &bytes).ok());
  DeviceBuffer ws(bytes);
  ws.poison();
  const Status st = indexer_select_prefill(a, o, {ws.get(), bytes}, ctx);
  if (status)
    *status = st;
  else
    EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  dout.to_host(got);
  return got;
}

void expect_same(const HostTensor& want, const HostTensor& got, const std::string& what) {
  int64_t bad = 0;
  for (int64_t j = 0; j < want.numel(); ++j)
    if (want.get(j) != got.get(j) && bad++ < 3)
      ADD_FAILURE() << what << ": entry " << j << " got " << got.get(j) << " want " << want.get(j);
  EXPECT_EQ(bad, 0) << what;
}

TEST(IndexerSelectApiGpu, EveryPathEqualsTheCpuEntry) {
  for (auto [T, N, k] : {std::tuple{200, 3000, 256}, std::tuple{9, 700, 64}}) {
    const Inputs c(T, N, 11 + T);
    const OnDevice d(c);
    for (TopkOrder order : {TopkOrder::best_first, TopkOrder::by_position}) {
      HostTensor want(DType::i32, {T, k});
      want.poison();
      ASSERT_TRUE(indexer_select_prefill(cpu_args(c, k, order, want)).ok());
      const std::string name = std::to_string(T) + "x" + std::to_string(N) + " k " +
                               std::to_string(k) +
                               (order == TopkOrder::best_first ? " best_first" : " by_position");
      const HostTensor automatic = run_gpu(c, d, k, order, {IndexerSelectPath::automatic});
      const HostTensor unfused = run_gpu(c, d, k, order, {IndexerSelectPath::unfused});
      expect_same(want, automatic, name + " automatic");
      expect_same(want, unfused, name + " unfused");
      expect_same(unfused, automatic, name + " automatic vs unfused");
      expect_same(want, run_gpu(c, d, k, order, {IndexerSelectPath::fused}), name + " fused");
      // capacity k: rows with more than k candidates overflow into the fallback.
      expect_same(want, run_gpu(c, d, k, order, {IndexerSelectPath::fused, k}),
                  name + " fused capacity k");
    }
  }
}

TEST(IndexerSelectApiGpu, CheckedModeNamesABadKeyRange) {
  Inputs c(4, 300, 3);
  c.ken.set(2, 301.0);
  const OnDevice d(c);
  ExecContext ctx;
  ctx.check_device_values = true;
  Status st;
  run_gpu(c, d, 64, TopkOrder::best_first, {}, ctx, &st);
  EXPECT_EQ(st.code(), Errc::out_of_range) << st.to_string();
  EXPECT_NE(st.to_string().find("k_end[2] = 301 is past N = 300"), std::string::npos)
      << st.to_string();
}

}  // namespace
}  // namespace mla
