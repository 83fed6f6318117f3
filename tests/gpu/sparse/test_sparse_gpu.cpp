// GPU sparse attention (src/cuda/sparse): sparse decode and sparse prefill
// against the CPU reference. Every kernel test runs once per sparse::Kernel
// value: automatic through the public API (mla::sparse_decode /
// mla::sparse_prefill), the others forced through the CUDA backend; a case a
// forced kernel cannot run must be refused with an error naming the kernel.
// Cases: bf16 and fp8 caches, -1 entries and entries outside the cache,
// all-invalid rows, topk_length, lists split over workers, index lists whose
// [B, s_q] dims do not flatten, sparse == dense when the list holds every key.
// Fresh random inputs, outputs poisoned before every run.
//
// Error bounds (as the dense decode's): the kernels round P to bf16 for P.V
// and the output to bf16, ~2^-9 relative per element: 1e-2 of the output's
// norm; lse is accumulated in f32 over <= 2048 terms: 1e-3.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/random.hpp"
#include "cuda/sparse/sparse_cuda.hpp"
#include "cuda/sparse/sparse_params.hpp"
#include "gpu/gpu_buffer.hpp"
#include "mla/decode.hpp"
#include "mla/sparse.hpp"
#include "reference/decode_ref.hpp"

namespace mla {
namespace {

using cuda::sparse::Kernel;
using testing::DeviceBuffer;
using testing::HostTensor;
using testing::random_tensor;
using testing::Rng;

class SparseGpu : public ::testing::TestWithParam<Kernel> {};
INSTANTIATE_TEST_SUITE_P(Kernels, SparseGpu, ::testing::ValuesIn(cuda::sparse::kKernels),
                         [](const ::testing::TestParamInfo<Kernel>& info) {
                           return std::string(cuda::sparse::kernel_name(info.param));
                         });

bool same_bytes(const HostTensor& a, const HostTensor& b) {
  const size_t n = size_t(a.numel()) * dtype_size(a.dtype);
  return std::memcmp(a.storage.data(), b.storage.data(), n) == 0;
}

void expect_refused(const Status& st, Kernel k) {
  EXPECT_EQ(st.code(), Errc::unsupported) << st.to_string();
  EXPECT_NE(st.message().find(cuda::sparse::kernel_name(k)), std::string::npos) << st.to_string();
}

// Sizing and the call, through the public API (automatic) or the backend with
// the kernel forced.
struct DecodeRun {
  Status size(const SparseDecodeArgs& a, Kernel k, size_t* need) {
    if (k == Kernel::automatic) return sparse_workspace_size(a, need);
    return cuda::sparse_decode_workspace_size(a, need, {.kernel = k});
  }
  Status call(const SparseDecodeArgs& a, Kernel k, Workspace ws) {
    if (k == Kernel::automatic) return sparse_decode(a, ws);
    return cuda::sparse_decode(a, ws, {}, {.kernel = k});
  }
};

// Oracle for one query row: the dense CPU decode over a cache made of just
// the listed entries (page size 1; -1 and out-of-range entries dropped).
void sparse_oracle(const testing::PagedCache& cache, const std::vector<int32_t>& list,
                   const HostTensor& q, int64_t qoff, int h, float scale, std::vector<double>* out,
                   std::vector<double>* lse) {
  const int64_t esz = cache.spec.format == KvFormat::bf16 ? 2 : 1;
  const int64_t ebytes = cache.entry_elems() * esz;
  const int64_t cap = cache.num_pages * cache.spec.page_size;
  std::vector<const uint8_t*> ents;
  for (int32_t s : list)
    if (s >= 0 && s < cap) {
      const int64_t page = s / cache.spec.page_size, off = s % cache.spec.page_size;
      ents.push_back(reinterpret_cast<const uint8_t*>(cache.storage.data()) +
                     (page * cache.page_stride() + off * cache.entry_elems()) * esz);
    }
  out->assign(size_t(h) * kDv, 0.0);
  lse->assign(h, -INFINITY);
  if (ents.empty()) return;
  const int64_t n = int64_t(ents.size());
  std::vector<uint64_t> store((n * ebytes + 7) / 8 + 1);
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(reinterpret_cast<uint8_t*>(store.data()) + i * ebytes, ents[i], ebytes);
  KvCacheView kv;
  kv.format = cache.spec.format;
  kv.data = TensorView::make(store.data(), cache.dtype(), {n, 1, 1, cache.entry_elems()});
  if (kv.format == KvFormat::fp8_e4m3)
    kv.scale = TensorView::make(const_cast<float*>(&cache.scale), DType::f32, {1});
  HostTensor qq(DType::f32, {1, 1, h, kDqk});
  for (int64_t i = 0; i < h * kDqk; ++i) qq.set(i, q.get(qoff + i));
  HostTensor bt(DType::i32, {1, n}), len(DType::i32, {1});
  for (int64_t i = 0; i < n; ++i) bt.set(i, double(i));
  len.set(0, double(n));
  HostTensor o(DType::f32, {1, 1, h, kDv}), l(DType::f32, {1, h, 1});
  DecodeArgs a;
  a.q = qq.view(), a.kv = kv, a.block_table = bt.view(), a.cache_seqlens = len.view();
  a.softmax_scale = scale, a.causal = false, a.out = o.view(), a.lse = l.view();
  Status st = reference::mla_decode(a);
  ASSERT_TRUE(st.ok()) << st.to_string();
  for (int64_t i = 0; i < h * kDv; ++i) (*out)[i] = o.get(i);
  for (int i = 0; i < h; ++i) (*lse)[i] = l.get(i);
}

// One sparse decode on the device: the cache, q and index lists uploaded, out
// [B, s_q, h, 512] bf16 and lse [B, h, s_q] poisoned; `a` is the call's arguments.
struct SparseOnDevice {
  DeviceBuffer dkv, dq, didx;
  HostTensor out, lse;
  DeviceBuffer dout, dlse;
  DeviceBuffer dscale;  // fp8_e4m3: the cache's scale
  SparseDecodeArgs a;
  SparseOnDevice(const testing::PagedCache& cache, const HostTensor& q, const HostTensor& idx,
                 float scale)
      : dkv(cache.storage.data(), cache.storage.size() * 8),
        dq(q),
        didx(idx),
        out(DType::bf16, {q.shape[0], q.shape[1], q.shape[2], kDv}),
        lse(DType::f32, {q.shape[0], q.shape[2], q.shape[1]}),
        dout(out),
        dlse(lse) {
    dout.poison(), dlse.poison();
    a.q = dq.view(q);
    a.kv = cache.view(Device::cuda(0));
    a.kv.data.data = dkv.get();
    if (cache.spec.format == KvFormat::fp8_e4m3) {
      dscale = DeviceBuffer(&cache.scale, 4);
      a.kv.scale.data = dscale.get();
    }
    a.indices = didx.view(idx);
    a.softmax_scale = scale, a.out = dout.view(out), a.lse = dlse.view(lse);
  }
  void fetch() { dout.to_host(out), dlse.to_host(lse); }
};

struct SparseCase {
  KvFormat format;
  int B, s_q, h, topk, page;
  bool use_topk_length;
  // indices is a view of the first s_q of s_q + 1 token rows per request:
  // its [B, s_q] dims do not flatten into one stride (B > 1, s_q > 1).
  bool unflat_index = false;
  // fp8 block scales 2^[min, max] (above 2^7: the decode kernel's f16 path
  // shifts the keys, decode_kernel.cuh), and q times 2^q_exp2 to keep the
  // scores O(1-10).
  int min_scale_exp = -8, max_scale_exp = -2, q_exp2 = 0;
};

// result: if not null, receives the run's out and lse (comparisons).
struct SparseResult {
  HostTensor out, lse;
};
void run_sparse_case(Rng& rng, const SparseCase& c, Kernel kernel, SparseResult* result = nullptr) {
  SCOPED_TRACE(::testing::Message()
               << kv_format_name(c.format) << " B " << c.B << " s_q " << c.s_q << " h " << c.h
               << " topk " << c.topk << " page " << c.page
               << (c.unflat_index ? " unflat index" : "") << " scales 2^" << c.min_scale_exp
               << "..2^" << c.max_scale_exp << " kernel " << cuda::sparse::kernel_name(kernel));
  std::vector<int32_t> lens(c.B);
  for (auto& L : lens) L = int32_t(rng.randint(c.topk / 2, c.topk * 3));
  testing::PagedCacheSpec spec;
  spec.format = c.format, spec.page_size = c.page,
  spec.page_pad = c.format == KvFormat::bf16 ? 8 : 16;
  spec.min_scale_exp = c.min_scale_exp, spec.max_scale_exp = c.max_scale_exp;
  testing::PagedCache cache = testing::make_paged_cache(rng, lens, spec);
  const int64_t cap = cache.num_pages * c.page;
  HostTensor q = random_tensor(rng, DType::bf16, {c.B, c.s_q, c.h, kDqk}, -2, 2);
  for (int64_t i = 0; i < q.numel(); ++i) q.set(i, std::ldexp(q.get(i), c.q_exp2));
  const int rows = c.s_q + (c.unflat_index ? 1 : 0);  // index rows per request
  HostTensor idx(DType::i32, {c.B, rows, c.topk});
  HostTensor tl(DType::i32, {c.B});
  auto at = [&](int b, int i, int j) { return (int64_t(b) * rows + i) * c.topk + j; };
  for (int b = 0; b < c.B; ++b) {
    tl.set(b, double(b == 0 ? 0 : rng.randint(1, c.topk)));
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < c.topk; ++j) {
        const int64_t m = rng.randint(0, 9);
        int64_t v = cache.slot(b, rng.randint(0, lens[b] - 1));
        if (m == 0) v = -1;
        if (m == 1 && j % 2) v = cap + 5;    // outside the cache: skipped, never read
        if (b == c.B - 1 && i == 0) v = -1;  // an all-invalid row
        idx.set(at(b, i, j), double(v));
      }
  }
  const float scale = 0.1352f;
  SparseOnDevice dev(cache, q, idx, scale);
  DeviceBuffer dtl(tl);
  SparseDecodeArgs& a = dev.a;
  a.indices.shape[1] = c.s_q;  // the first s_q rows (all of them unless unflat_index)
  if (c.use_topk_length) a.topk_length = dtl.view(tl);
  const HostTensor &out = dev.out, &lse = dev.lse;

  const cuda::sparse::Problem problem{.fp8 = c.format == KvFormat::fp8_ds_mla,
                                      .fp8_e4m3 = c.format == KvFormat::fp8_e4m3,
                                      .h_q = c.h,
                                      .tokens = int64_t(c.B) * c.s_q,
                                      .page_size = c.page,
                                      .flat_index = !(c.unflat_index && c.B > 1 && c.s_q > 1)};
  DecodeRun run;
  size_t need = 0;
  if (kernel == Kernel::automatic && c.format == KvFormat::fp8_e4m3 && !problem.flat_index) {
    // No kernel reads fp8_e4m3 keys through index lists that do not flatten: a clear refusal.
    const Status st = run.size(a, kernel, &need);
    EXPECT_EQ(st.code(), Errc::unsupported) << st.to_string();
    EXPECT_NE(st.message().find("indices"), std::string::npos) << st.to_string();
    return;
  }
  if (kernel != Kernel::automatic && !cuda::sparse::kernel_takes(kernel, problem)) {
    expect_refused(run.size(a, kernel, &need), kernel);
    expect_refused(run.call(a, kernel, Workspace{}), kernel);
    return;
  }
  ASSERT_MLA_OK(run.size(a, kernel, &need));
  DeviceBuffer ws(need);
  if (need) {  // the size is what the call uses: one byte less is an error, before any launch
    const Status st = run.call(a, kernel, Workspace{ws.get(), need - 1});
    EXPECT_EQ(st.code(), Errc::insufficient_workspace) << st.to_string();
    EXPECT_NE(st.message().find(std::to_string(need)), std::string::npos) << st.message();
  }
  ASSERT_MLA_OK(run.call(a, kernel, Workspace{ws.get(), need}));
  MLA_CUDA_CHECK(cudaDeviceSynchronize());
  dev.fetch();
  if (result != nullptr) *result = {dev.out, dev.lse};
  double err2 = 0, ref2 = 0, lse_err = 0;
  int bad_inf = 0;
  for (int b = 0; b < c.B; ++b)
    for (int i = 0; i < c.s_q; ++i) {
      std::vector<int32_t> list;
      const int n = c.use_topk_length ? int(tl.get(b)) : c.topk;
      for (int j = 0; j < std::min(n, c.topk); ++j) list.push_back(int32_t(idx.get(at(b, i, j))));
      std::vector<double> ro, rl;
      sparse_oracle(cache, list, q, (int64_t(b) * c.s_q + i) * c.h * kDqk, c.h, scale, &ro, &rl);
      for (int h = 0; h < c.h; ++h) {
        const double gl = lse.get((int64_t(b) * c.h + h) * c.s_q + i);
        if (std::isinf(rl[h])) {
          bad_inf += !(std::isinf(gl) && gl < 0);
        } else {
          lse_err = std::max(lse_err, std::isfinite(gl) ? std::fabs(gl - rl[h]) : 1e9);
        }
        for (int d = 0; d < kDv; ++d) {
          const double g = out.get(((int64_t(b) * c.s_q + i) * c.h + h) * kDv + d),
                       r = ro[h * kDv + d];
          err2 += std::isfinite(g) ? (g - r) * (g - r) : 1e9;
          ref2 += r * r;
        }
      }
    }
  EXPECT_LT(std::sqrt(err2 / std::max(ref2, 1e-30)), 1e-2);
  EXPECT_LT(lse_err, 1e-3) << "lse";
  EXPECT_EQ(bad_inf, 0) << "rows with no key must give lse -inf";
}

// The same inputs (one seed) through two kernels, for the tests that compare them.
void run_sparse_pair(uint64_t seed, const SparseCase& c, Kernel first, Kernel second,
                     SparseResult* a, SparseResult* b) {
  {
    Rng rng(seed);
    run_sparse_case(rng, c, first, a);
  }
  Rng rng(seed);  // the same inputs
  run_sparse_case(rng, c, second, b);
}

// Heads 16 to 128 (16/32 are masked rows of the decode kernel's 64-row CTA),
// s_q 1 to 4, pages 1 to 128, topk not a multiple of the 64-key tile, few
// tokens (lists split over workers) and more tokens than workers, index
// lists that do not flatten (only mma_sync takes them).
TEST_P(SparseGpu, DecodeMatchesReference) {
  Rng rng(112);
  for (KvFormat f : {KvFormat::bf16, KvFormat::fp8_ds_mla})
    for (int h : {16, 32, 64, 128}) {
      run_sparse_case(rng, {f, 3, 2, h, 128, 64, true}, GetParam());
      run_sparse_case(rng, {f, 2, 1, h, 200, 16, false}, GetParam());
    }
  run_sparse_case(rng, {KvFormat::bf16, 2, 4, 64, 64, 1, true}, GetParam());
  run_sparse_case(rng, {KvFormat::fp8_ds_mla, 2, 3, 128, 256, 128, false}, GetParam());
  run_sparse_case(rng, {KvFormat::fp8_ds_mla, 3, 2, 64, 192, 1, false}, GetParam());
  run_sparse_case(rng, {KvFormat::bf16, 40, 3, 32, 64, 16, true}, GetParam());
  run_sparse_case(rng, {KvFormat::bf16, 150, 1, 128, 100, 64, true}, GetParam());
  run_sparse_case(rng, {KvFormat::bf16, 3, 2, 64, 128, 64, true, true}, GetParam());
  run_sparse_case(rng, {KvFormat::fp8_ds_mla, 2, 3, 16, 100, 16, false, true}, GetParam());
  // fp8 keys past f16's range (block scales up to 2^10) and the smallest
  // scale (products in f16's subnormal range), q scaled to match.
  run_sparse_case(rng, {KvFormat::fp8_ds_mla, 3, 2, 128, 256, 64, true, false, 4, 10, -13},
                  GetParam());
  run_sparse_case(rng, {KvFormat::fp8_ds_mla, 3, 1, 16, 200, 16, false, false, -13, -13, 8},
                  GetParam());
  // fp8_e4m3 (one per-tensor scale, every code but NaN): the same producer
  // without block scales; the same bounds (test_decode_gpu.cpp says why).
  for (int h : {16, 32, 64, 128}) {
    run_sparse_case(rng, {KvFormat::fp8_e4m3, 3, 2, h, 128, 64, true}, GetParam());
    run_sparse_case(rng, {KvFormat::fp8_e4m3, 2, 1, h, 200, 16, false}, GetParam());
  }
  run_sparse_case(rng, {KvFormat::fp8_e4m3, 2, 4, 64, 100, 1, false}, GetParam());
  run_sparse_case(rng, {KvFormat::fp8_e4m3, 3, 2, 64, 128, 64, true, true}, GetParam());
}

// The decode kernel's one-way math form (decode_oneway) against its seesaw
// (decode_wgmma) on the same inputs: the same S, maxima, P and O terms, only
// each row's sum l added in another order (test_decode_gpu.cpp's
// DecodeGpuOneWay says why), so out within 2^-7 relative (one bf16 ulp) and
// lse within 1e-5: all three caches, h 16..128, s_q 1..4, -1 and
// out-of-cache entries, all-invalid rows, topk_length (0 for a request),
// top-k below one tile and with odd tile counts, shifted fp8 keys (block
// scales up to 2^10).
TEST(SparseGpuOneWay, MatchesDecodeWgmma) {
  const SparseCase cases[] = {
      {KvFormat::fp8_ds_mla, 3, 1, 128, 2048, 64, true},
      {KvFormat::fp8_ds_mla, 2, 2, 64, 200, 16, false},
      {KvFormat::fp8_ds_mla, 4, 1, 16, 40, 1, true},
      {KvFormat::fp8_ds_mla, 3, 3, 128, 320, 64, true, false, 4, 10, -13},
      {KvFormat::fp8_ds_mla, 2, 4, 32, 130, 64, false},
      {KvFormat::fp8_e4m3, 3, 1, 128, 2048, 64, true},
      {KvFormat::fp8_e4m3, 2, 2, 32, 200, 16, false},
      {KvFormat::fp8_e4m3, 5, 1, 128, 63, 1, true},
      {KvFormat::bf16, 3, 1, 128, 2048, 64, true},
      {KvFormat::bf16, 2, 4, 64, 150, 16, true},
      {KvFormat::bf16, 3, 2, 16, 65, 1, false},
  };
  uint64_t seed = 2200;
  for (const SparseCase& c : cases) {
    SparseResult seesaw, oneway;
    run_sparse_pair(seed, c, Kernel::decode_wgmma, Kernel::decode_oneway, &seesaw, &oneway);
    ++seed;
    ASSERT_FALSE(HasFailure());
    int bad = 0;
    for (int64_t i = 0; i < seesaw.out.numel(); ++i) {
      const double x = seesaw.out.get(i), y = oneway.out.get(i);
      if (!(std::isnan(x) && std::isnan(y)) &&
          !(std::fabs(x - y) <= std::ldexp(std::max(std::fabs(x), std::fabs(y)), -7)))
        bad++;
    }
    for (int64_t i = 0; i < seesaw.lse.numel(); ++i) {
      const double x = seesaw.lse.get(i), y = oneway.lse.get(i);
      if (!((std::isnan(x) && std::isnan(y)) || x == y ||
            std::fabs(x - y) <= 1e-5 + 1e-6 * std::fabs(x)))
        bad++;
    }
    EXPECT_EQ(bad, 0) << kv_format_name(c.format) << " B " << c.B << " s_q " << c.s_q << " h "
                      << c.h << " topk " << c.topk;
  }
}

// Small one-way cases for compute-sanitizer (racecheck, synccheck: the P
// hand-over between the math warpgroups): all three caches, topk below one
// tile and across three, -1 entries, topk_length.
TEST(SparseGpuOneWay, SanitizerSmall) {
  Rng rng(2300);
  run_sparse_case(rng, {KvFormat::fp8_ds_mla, 2, 1, 128, 150, 16, true}, Kernel::decode_oneway);
  run_sparse_case(rng, {KvFormat::fp8_e4m3, 2, 2, 64, 40, 64, false}, Kernel::decode_oneway);
  run_sparse_case(rng, {KvFormat::bf16, 2, 1, 32, 190, 1, true}, Kernel::decode_oneway);
}

// The fp8 producer's sector-pair loads (decode_wgmma_sp, decode_kernel.cuh)
// fill the stages with the same bytes as decode_wgmma's halves layout, and the
// math is the same code: out and lse bit-identical on the same inputs. Both
// fp8 caches, h 16..128, s_q 1..4, pages 1..128 (padded page strides: entries
// at either half of a sector), -1 and out-of-cache entries, all-invalid rows,
// topk_length, shifted fp8_ds_mla keys (block scales up to 2^10).
TEST(SparseGpuSectorPairs, BitIdenticalToDecodeWgmma) {
  const SparseCase cases[] = {
      {KvFormat::fp8_ds_mla, 3, 1, 128, 2048, 64, true},
      {KvFormat::fp8_ds_mla, 2, 2, 64, 200, 16, false},
      {KvFormat::fp8_ds_mla, 4, 1, 16, 40, 1, true},
      {KvFormat::fp8_ds_mla, 3, 3, 128, 320, 64, true, false, 4, 10, -13},
      {KvFormat::fp8_ds_mla, 2, 4, 32, 130, 128, false},
      {KvFormat::fp8_e4m3, 3, 1, 128, 2048, 64, true},
      {KvFormat::fp8_e4m3, 2, 2, 32, 200, 16, false},
      {KvFormat::fp8_e4m3, 5, 1, 128, 63, 1, true},
  };
  uint64_t seed = 2400;
  for (const SparseCase& c : cases) {
    SparseResult halves, pairs;
    run_sparse_pair(seed, c, Kernel::decode_wgmma, Kernel::decode_wgmma_sp, &halves, &pairs);
    ++seed;
    ASSERT_FALSE(HasFailure());
    EXPECT_TRUE(same_bytes(halves.out, pairs.out) && same_bytes(halves.lse, pairs.lse))
        << kv_format_name(c.format) << " B " << c.B << " s_q " << c.s_q << " h " << c.h << " topk "
        << c.topk << " page " << c.page;
  }
}

// Small sector-pair cases for compute-sanitizer (memcheck: the pair loads'
// addresses; racecheck: the stage stores): both fp8 caches, topk below one
// tile and across three, -1 entries, topk_length.
TEST(SparseGpuSectorPairs, SanitizerSmall) {
  Rng rng(2500);
  run_sparse_case(rng, {KvFormat::fp8_ds_mla, 2, 1, 128, 150, 16, true}, Kernel::decode_wgmma_sp);
  run_sparse_case(rng, {KvFormat::fp8_e4m3, 2, 2, 64, 40, 64, false}, Kernel::decode_wgmma_sp);
  run_sparse_case(rng, {KvFormat::fp8_ds_mla, 3, 1, 16, 190, 1, false}, Kernel::decode_wgmma_sp);
}

// The automatic choice: for decode the decode kernel (one-way form for bf16
// entries, the seesaw for fp8 ones) unless the index lists do not flatten; for
// prefill the prefill kernel.
TEST(SparseGpuArgs, KernelChoice) {
  using cuda::sparse::choose_kernel;
  EXPECT_EQ(choose_kernel({.h_q = 16, .tokens = 8, .page_size = 64, .flat_index = true}),
            Kernel::decode_oneway);
  EXPECT_EQ(choose_kernel({.h_q = 128, .tokens = 65535, .page_size = 1, .flat_index = true}),
            Kernel::decode_oneway);
  EXPECT_EQ(
      choose_kernel({.fp8 = true, .h_q = 128, .tokens = 64, .page_size = 64, .flat_index = true}),
      Kernel::decode_wgmma);
  EXPECT_EQ(choose_kernel(
                {.fp8_e4m3 = true, .h_q = 64, .tokens = 64, .page_size = 64, .flat_index = true}),
            Kernel::decode_wgmma);
  EXPECT_EQ(choose_kernel({.h_q = 64, .tokens = 8, .page_size = 64, .flat_index = false}),
            Kernel::mma_sync);
  // Prefill: the sparse prefill kernel (gathered key tiles), any head count the API takes.
  for (int h : {16, 32, 64, 128})
    EXPECT_EQ(choose_kernel(
                  {.prefill = true, .h_q = h, .tokens = 4096, .page_size = 1, .flat_index = true}),
              Kernel::prefill);
}

// mla::sparse_prefill on CUDA tensors against the same API on CPU tensors
// (the fp64 reference). Index lists: random rows of kv with 1 in 8 entries -1,
// row 1 all -1 (out 0, lse -inf), row 2 with only its first 3 entries valid,
// row 3 holding one row of kv `topk` times (duplicates count, as in the
// reference). Each case also in launches of 3 query tokens
// (Options::prefill_chunk_tokens: the path of s_q past 65535, whose chunk
// offsets and workspace sizing a real s_q that long would need > 1 GB of q
// to test).
struct PrefillCase {
  int h, s_q, s_kv, topk;
  bool fp8 = false;  // kv: [s_kv, 656] fp8_ds_mla entries (read dequantised)
};

void run_prefill_case(Rng& rng, const PrefillCase& c, Kernel kernel) {
  const int h = c.h, s_q = c.s_q, s_kv = c.s_kv, topk = c.topk;
  HostTensor q = random_tensor(rng, DType::bf16, {s_q, h, kDqk}, -2, 2);
  HostTensor kv = random_tensor(rng, DType::bf16, {s_kv, kDqk}, -2, 2);
  if (c.fp8) {
    kv = HostTensor(DType::u8, {s_kv, Fp8DsMlaLayout::kEntryBytes});
    testing::PagedCacheSpec spec;
    spec.format = KvFormat::fp8_ds_mla, spec.min_scale_exp = -10, spec.max_scale_exp = -7;
    for (int64_t r = 0; r < s_kv; ++r)
      testing::fill_random_entry(
          rng, spec, static_cast<uint8_t*>(kv.data()) + r * Fp8DsMlaLayout::kEntryBytes);
  }
  HostTensor idx(DType::i32, {s_q, topk});
  for (int i = 0; i < s_q; ++i)
    for (int j = 0; j < topk; ++j) {
      double v = double(rng.randint(0, s_kv - 1));
      if (i == 1 || (i == 2 && j >= 3) || rng.randint(0, 7) == 0) v = -1.0;
      if (i == 3) v = double(s_kv - 1);
      idx.set(int64_t(i) * topk + j, v);
    }
  HostTensor ro(DType::f64, {s_q, h, kDv}), rl(DType::f64, {s_q, h});
  SparsePrefillArgs ra;
  ra.q = q.view(), ra.kv = kv.view(), ra.indices = idx.view(), ra.softmax_scale = 0.0625f;
  ra.kv_format = c.fp8 ? KvFormat::fp8_ds_mla : KvFormat::bf16;
  ra.out = ro.view(), ra.lse = rl.view();
  ASSERT_MLA_OK(sparse_prefill(ra));
  for (const int64_t chunk : {cuda::sparse::kMaxTokensPerLaunch, int64_t(3)}) {
    SCOPED_TRACE(::testing::Message() << "kernel " << cuda::sparse::kernel_name(kernel) << " chunk "
                                      << chunk << " h " << h << " s_q " << s_q << " s_kv " << s_kv
                                      << " topk " << topk << " fp8 " << c.fp8);
    const cuda::sparse::Options opts{.kernel = kernel, .prefill_chunk_tokens = chunk};
    const bool api = opts.kernel == Kernel::automatic &&
                     opts.prefill_chunk_tokens == cuda::sparse::kMaxTokensPerLaunch;
    auto size = [&](const SparsePrefillArgs& a, size_t* need) {
      return api ? sparse_workspace_size(a, need)
                 : cuda::sparse_prefill_workspace_size(a, need, opts);
    };
    auto call = [&](const SparsePrefillArgs& a, Workspace ws) {
      return api ? sparse_prefill(a, ws) : cuda::sparse_prefill(a, ws, {}, opts);
    };
    HostTensor out(DType::bf16, {s_q, h, kDv}), lse(DType::f32, {s_q, h});
    DeviceBuffer dq(q), dkv(kv), didx(idx), dout(out), dlse(lse);
    dout.poison(), dlse.poison();
    SparsePrefillArgs a = ra;
    a.q = dq.view(q), a.kv = dkv.view(kv), a.indices = didx.view(idx), a.out = dout.view(out),
    a.lse = dlse.view(lse);
    size_t need = 0;
    // A forced kernel that does not take these entries (decode_wgmma_sp: fp8 only) refuses by name.
    const cuda::sparse::Problem problem{.prefill = true,
                                        .fp8 = c.fp8,
                                        .h_q = h,
                                        .tokens = std::min<int64_t>(s_q, chunk),
                                        .page_size = 1,
                                        .flat_index = true};
    if (kernel != Kernel::automatic && !cuda::sparse::kernel_takes(kernel, problem)) {
      expect_refused(size(a, &need), kernel);
      expect_refused(call(a, Workspace{}), kernel);
      continue;
    }
    ASSERT_MLA_OK(size(a, &need));
    DeviceBuffer ws(need);
    if (need) {  // the size is what the call uses: one byte less is an error, before any launch
      const Status st = call(a, Workspace{ws.get(), need - 1});
      EXPECT_EQ(st.code(), Errc::insufficient_workspace) << st.to_string();
    }
    ASSERT_MLA_OK(call(a, Workspace{ws.get(), need}));
    MLA_CUDA_CHECK(cudaDeviceSynchronize());
    dout.to_host(out), dlse.to_host(lse);
    // A second call gives the same bits (no split depends on timing).
    HostTensor out2(DType::bf16, {s_q, h, kDv}), lse2(DType::f32, {s_q, h});
    dout.poison(), dlse.poison();
    ASSERT_MLA_OK(call(a, Workspace{ws.get(), need}));
    MLA_CUDA_CHECK(cudaDeviceSynchronize());
    dout.to_host(out2), dlse.to_host(lse2);
    EXPECT_TRUE(same_bytes(out, out2) && same_bytes(lse, lse2)) << "a second call differs";
    double err2 = 0, ref2 = 0, lerr = 0;
    int bad_inf = 0, bad_zero = 0;
    for (int64_t i = 0; i < out.numel(); ++i) {
      const double d = out.get(i) - ro.get(i);
      err2 += std::isfinite(d) ? d * d : 1e9, ref2 += ro.get(i) * ro.get(i);
    }
    if (s_q > 1)
      for (int64_t i = 0; i < int64_t(h) * kDv; ++i)
        bad_zero += out.get(int64_t(h) * kDv + i) != 0.0;
    for (int64_t i = 0; i < lse.numel(); ++i) {
      if (std::isinf(rl.get(i)))
        bad_inf += !(std::isinf(lse.get(i)) && lse.get(i) < 0);
      else
        lerr = std::max(lerr, std::isfinite(lse.get(i)) ? std::fabs(lse.get(i) - rl.get(i)) : 1e9);
    }
    EXPECT_LT(std::sqrt(err2 / ref2), 1e-2);
    EXPECT_LT(lerr, 1e-3);
    EXPECT_EQ(bad_inf, 0) << "the all-invalid row must give lse -inf";
    EXPECT_EQ(bad_zero, 0) << "the all-invalid row must give out 0";
  }
}

TEST_P(SparseGpu, PrefillMatchesReference) {
  Rng rng(111);
  const PrefillCase cases[] = {
      {16, 300, 777, 192},   // more tokens than workers, topk a multiple of 64
      {64, 5, 777, 192},     // few tokens: split over workers (fp32 partials)
      {128, 5, 777, 192},    // two row blocks of 64 heads
      {128, 6, 40, 100},     // s_kv below topk (repeats), topk not a multiple of 64
      {32, 4, 1, 7},         // a one-row kv, a list shorter than one tile
      {64, 8, 70000, 2048},  // DeepSeek-V3.2's top-2048, kv rows past 65536
      {128, 150, 4096, 64},  // one tile per token, 150 tokens > 66 workers
      // fp8_ds_mla rows (a cached fp8 prefix), through every kernel
      {64, 5, 777, 192, true},
      {128, 6, 40, 100, true},
      {16, 300, 777, 192, true},
  };
  for (const PrefillCase& c : cases) run_prefill_case(rng, c, GetParam());
}

// What the CUDA path cannot take is an error naming the argument, before any launch.
TEST(SparseGpuArgs, ApiRejectsWhatTheKernelsCannotTake) {
  HostTensor q(DType::bf16, {1, 20, kDqk}), kv(DType::bf16, {8, kDqk}), idx(DType::i32, {1, 4});
  HostTensor out(DType::bf16, {1, 20, kDv}), lse(DType::f32, {1, 20});
  DeviceBuffer dq(q), dkv(kv), didx(idx), dout(out), dlse(lse);
  SparsePrefillArgs a;
  a.q = dq.view(q), a.kv = dkv.view(kv), a.indices = didx.view(idx), a.softmax_scale = 0.1f;
  a.out = dout.view(out), a.lse = dlse.view(lse);
  Status st = sparse_prefill(a);
  EXPECT_EQ(st.code(), Errc::unsupported) << st.to_string();
  EXPECT_NE(st.message().find("h_q = 20"), std::string::npos) << st.message();
  HostTensor q16(DType::bf16, {1, 16, kDqk}), out16(DType::f32, {1, 16, kDv}),
      lse16(DType::f32, {1, 16});
  DeviceBuffer dq16(q16), dout16(out16), dlse16(lse16);
  a.q = dq16.view(q16), a.out = dout16.view(out16), a.lse = dlse16.view(lse16);
  st = sparse_prefill(a);
  EXPECT_EQ(st.code(), Errc::unsupported) << st.to_string();
  EXPECT_NE(st.message().find("out: dtype f32"), std::string::npos) << st.message();
  // The prefill chunk size is checked.
  HostTensor out16b(DType::bf16, {1, 16, kDv});
  DeviceBuffer dout16b(out16b);
  a.out = dout16b.view(out16b);
  size_t need = 0;
  ASSERT_MLA_OK(cuda::sparse_prefill_workspace_size(a, &need, {.prefill_chunk_tokens = 3}));
  st = cuda::sparse_prefill_workspace_size(a, &need, {.prefill_chunk_tokens = 0});
  EXPECT_EQ(st.code(), Errc::invalid_value) << st.to_string();
  EXPECT_NE(st.message().find("prefill_chunk_tokens"), std::string::npos) << st.message();
}

// The mma_sync kernel's own guard, called below the API.
TEST(SparseGpuArgs, MmaKernelRejectsHeadsNotMultipleOf16) {
  cuda::sparse::SparseAttnParams p;
  p.batch = 1, p.h_q = 20;
  Status st = cuda::sparse::launch_sparse_mma(p, nullptr, 0, nullptr);
  EXPECT_EQ(st.code(), Errc::invalid_value) << st.to_string();
}

// Sparse attention with a list holding every key equals dense decode.
TEST_P(SparseGpu, AllKeysEqualsDenseDecode) {
  Rng rng(108);
  for (KvFormat f : {KvFormat::bf16, KvFormat::fp8_ds_mla}) {
    SCOPED_TRACE(kv_format_name(f));
    const int B = 2, h = 64, L = 300, topk = 320;
    testing::PagedCacheSpec spec;
    spec.format = f, spec.page_size = 64;
    testing::PagedCache cache = testing::make_paged_cache(rng, {L, L - 17}, spec);
    HostTensor q = random_tensor(rng, DType::bf16, {B, 1, h, kDqk}, -2, 2);
    HostTensor idx(DType::i32, {B, 1, topk});
    for (int b = 0; b < B; ++b)
      for (int j = 0; j < topk; ++j)
        idx.set(b * topk + j, j < cache.seqlens[b] ? double(cache.slot(b, j)) : -1.0);
    HostTensor dense_o(DType::f32, {B, 1, h, kDv}), dense_l(DType::f32, {B, h, 1});
    DecodeArgs d;
    d.q = q.view(), d.kv = cache.view(), d.block_table = cache.block_table_view(),
    d.cache_seqlens = cache.seqlens_view();
    d.softmax_scale = 0.1352f, d.causal = true, d.out = dense_o.view(), d.lse = dense_l.view();
    ASSERT_MLA_OK(reference::mla_decode(d));
    SparseOnDevice dev(cache, q, idx, 0.1352f);
    const SparseDecodeArgs& a = dev.a;
    const HostTensor &out = dev.out, &lse = dev.lse;
    DecodeRun run;
    size_t need = 0;
    // A kernel that does not take decode (prefill) must refuse it by name.
    const cuda::sparse::Problem problem{.fp8 = f == KvFormat::fp8_ds_mla,
                                        .h_q = h,
                                        .tokens = B,
                                        .page_size = 64,
                                        .flat_index = true};
    if (GetParam() != Kernel::automatic && !cuda::sparse::kernel_takes(GetParam(), problem)) {
      expect_refused(run.size(a, GetParam(), &need), GetParam());
      expect_refused(run.call(a, GetParam(), Workspace{}), GetParam());
      continue;
    }
    ASSERT_MLA_OK(run.size(a, GetParam(), &need));
    DeviceBuffer ws(need);
    ASSERT_MLA_OK(run.call(a, GetParam(), Workspace{ws.get(), need}));
    MLA_CUDA_CHECK(cudaDeviceSynchronize());
    dev.fetch();
    double err2 = 0, ref2 = 0, lerr = 0;
    for (int64_t i = 0; i < out.numel(); ++i) {
      const double e = out.get(i) - dense_o.get(i);
      err2 += std::isfinite(e) ? e * e : 1e9, ref2 += dense_o.get(i) * dense_o.get(i);
    }
    for (int64_t i = 0; i < lse.numel(); ++i)
      lerr = std::max(lerr, std::fabs(lse.get(i) - dense_l.get(i)));
    EXPECT_LT(std::sqrt(err2 / ref2), 1e-2);
    EXPECT_LT(lerr, 1e-3);
  }
}

// Plan reuse (sparse_decode_plan): one schedule from topk_length, three
// "layers" (their own q, the same lists and lengths) bit-identical to the calls
// without a plan; a plan for another topk or batch is refused by name.
TEST(SparseGpuPlan, PlanReusedAcrossLayersIsBitIdentical) {
  Rng rng(77);
  const int B = 3, s_q = 2, h = 64, topk = 300, page = 64;
  std::vector<int32_t> lens = {900, 2000, 400};
  testing::PagedCacheSpec spec;
  spec.page_size = page;
  testing::PagedCache cache = testing::make_paged_cache(rng, lens, spec);
  HostTensor idx(DType::i32, {B, s_q, topk}), tl(DType::i32, {B});
  for (int b = 0; b < B; ++b) {
    tl.set(b, double(b == 1 ? 0 : rng.randint(1, topk)));
    for (int i = 0; i < s_q * topk; ++i)
      idx.set(b * s_q * topk + i,
              rng.randint(0, 9) == 0 ? -1.0 : double(cache.slot(b, rng.randint(0, lens[b] - 1))));
  }
  DeviceBuffer dkv(cache.storage.data(), cache.storage.size() * 8), didx(idx), dtl(tl);
  HostTensor out(DType::bf16, {B, s_q, h, kDv}), lse(DType::f32, {B, h, s_q});
  DeviceBuffer dout(out), dlse(lse);
  std::vector<HostTensor> qs;
  std::vector<DeviceBuffer> dqs;
  for (int l = 0; l < 3; ++l) {
    qs.push_back(random_tensor(rng, DType::bf16, {B, s_q, h, kDqk}, -2, 2));
    dqs.emplace_back(qs.back());
  }
  auto args = [&](int l) {
    SparseDecodeArgs a;
    a.q = dqs[l].view(qs[l]);
    a.kv = cache.view(Device::cuda(0));
    a.kv.data.data = dkv.get();
    a.indices = didx.view(idx);
    a.topk_length = dtl.view(tl);
    a.softmax_scale = 0.1352f, a.out = dout.view(out), a.lse = dlse.view(lse);
    return a;
  };
  size_t need = 0;
  ASSERT_MLA_OK(sparse_workspace_size(args(0), &need));
  DeviceBuffer ws(need), plan_ws(need);
  std::vector<HostTensor> want_out, want_lse;
  for (int l = 0; l < 3; ++l) {
    dout.poison(), dlse.poison();
    ASSERT_MLA_OK(sparse_decode(args(l), Workspace{ws.get(), need}));
    MLA_CUDA_CHECK(cudaDeviceSynchronize());
    dout.to_host(out), dlse.to_host(lse);
    want_out.push_back(out), want_lse.push_back(lse);
  }
  DecodePlan plan;
  ASSERT_MLA_OK(sparse_decode_plan(args(0), Workspace{plan_ws.get(), need}, &plan));
  EXPECT_TRUE(plan.sparse);
  EXPECT_EQ(plan.topk, topk);
  for (int l = 0; l < 3; ++l) {
    dout.poison(), dlse.poison(), ws.poison();
    SparseDecodeArgs a = args(l);
    a.plan = &plan;
    ASSERT_MLA_OK(sparse_decode(a, Workspace{ws.get(), need}));
    MLA_CUDA_CHECK(cudaDeviceSynchronize());
    dout.to_host(out), dlse.to_host(lse);
    EXPECT_TRUE(same_bytes(out, want_out[l])) << "layer " << l;
    EXPECT_TRUE(same_bytes(lse, want_lse[l])) << "layer " << l;
  }
  SparseDecodeArgs a = args(0);
  a.indices.shape[2] = topk - 1;  // another list width
  a.plan = &plan;
  Status st = sparse_decode(a, Workspace{ws.get(), need});
  EXPECT_EQ(st.code(), Errc::invalid_value) << st.to_string();
  EXPECT_NE(st.message().find("topk 300"), std::string::npos) << st.to_string();
  DecodePlan dense = plan;
  dense.sparse = false;
  a = args(0);
  a.plan = &dense;
  st = sparse_decode(a, Workspace{ws.get(), need});
  EXPECT_EQ(st.code(), Errc::invalid_value) << st.to_string();
  EXPECT_NE(st.message().find("decode_plan"), std::string::npos) << st.to_string();
}

}  // namespace
}  // namespace mla
