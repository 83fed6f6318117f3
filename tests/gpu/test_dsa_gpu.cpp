// GPU tests of sparse attention (src/cuda/dsa) against the CPU reference
// (bf16 and fp8 caches, -1 entries, all-invalid rows, topk_length, splits),
// and sparse == dense when the list holds every key. Fresh random inputs,
// outputs poisoned before every run. (The indexer's tests are in
// tests/gpu/indexer, top-k's in tests/gpu/topk.)
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <set>
#include <string>
#include <vector>

#include "common/random.hpp"
#include "cuda/decode/decode_sparse.hpp"
#include "cuda/dsa/sparse_launch.hpp"
#include "cuda/dsa/topk_cuda.hpp"
#include "cuda/dsa/topk_launch.hpp"
#include "gpu/gpu_buffer.hpp"
#include "mla/decode.hpp"
#include "mla/indexer.hpp"
#include "mla/sparse.hpp"
#include "mla/topk.hpp"
#include "reference/decode_ref.hpp"
#include "reference/fp8_quant.hpp"

namespace mla {
namespace {

using testing::HostTensor;
using testing::random_tensor;
using testing::Rng;
namespace dsa = mla::cuda::dsa;

using testing::DeviceBuffer;

bool same_bytes(const HostTensor& a, const HostTensor& b) {
  const size_t n = size_t(a.numel()) * dtype_size(a.dtype);
  return std::memcmp(a.storage.data(), b.storage.data(), n) == 0;
}

// ------------------------------------------------------- sparse attention ----

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
  out->assign(size_t(h) * 512, 0.0);
  lse->assign(h, -INFINITY);
  if (ents.empty()) return;
  const int64_t n = int64_t(ents.size());
  std::vector<uint64_t> store((n * ebytes + 7) / 8 + 1);
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(reinterpret_cast<uint8_t*>(store.data()) + i * ebytes, ents[i], ebytes);
  KvCacheView kv;
  kv.format = cache.spec.format;
  kv.data = TensorView::make(store.data(), cache.dtype(), {n, 1, 1, cache.entry_elems()});
  HostTensor qq(DType::f32, {1, 1, h, 576});
  for (int64_t i = 0; i < h * 576; ++i) qq.set(i, q.get(qoff + i));
  HostTensor bt(DType::i32, {1, n}), len(DType::i32, {1});
  for (int64_t i = 0; i < n; ++i) bt.set(i, double(i));
  len.set(0, double(n));
  HostTensor o(DType::f32, {1, 1, h, 512}), l(DType::f32, {1, h, 1});
  DecodeArgs a;
  a.q = qq.view(), a.kv = kv, a.block_table = bt.view(), a.cache_seqlens = len.view();
  a.softmax_scale = scale, a.causal = false, a.out = o.view(), a.lse = l.view();
  Status st = reference::mla_decode(a);
  ASSERT_TRUE(st.ok()) << st.to_string();
  for (int64_t i = 0; i < h * 512; ++i) (*out)[i] = o.get(i);
  for (int i = 0; i < h; ++i) (*lse)[i] = l.get(i);
}

struct SparseCase {
  KvFormat format;
  int B, s_q, h, topk, page;
  bool use_topk_length, split;
  bool via_api = false;  // through mla::sparse_decode (workspace from sparse_workspace_size)
  bool wgmma = false;    // kernel level: the wgmma decode kernel (sparse v2), not sparse_attn.cu
};

void run_sparse_case(Rng& rng, const SparseCase& c) {
  std::vector<int32_t> lens(c.B);
  for (auto& L : lens) L = int32_t(rng.randint(c.topk / 2, c.topk * 3));
  testing::PagedCacheSpec spec;
  spec.format = c.format, spec.page_size = c.page,
  spec.page_pad = c.format == KvFormat::bf16 ? 8 : 16;
  testing::PagedCache cache = testing::make_paged_cache(rng, lens, spec);
  const int64_t cap = cache.num_pages * c.page;
  HostTensor q = random_tensor(rng, DType::bf16, {c.B, c.s_q, c.h, 576}, -2, 2);
  HostTensor idx(DType::i32, {c.B, c.s_q, c.topk});
  HostTensor tl(DType::i32, {c.B});
  for (int b = 0; b < c.B; ++b) {
    tl.set(b, double(b == 0 ? 0 : rng.randint(1, c.topk)));
    for (int i = 0; i < c.s_q; ++i)
      for (int j = 0; j < c.topk; ++j) {
        const int64_t m = rng.randint(0, 9);
        int64_t v = cache.slot(b, rng.randint(0, lens[b] - 1));
        if (m == 0) v = -1;
        if (m == 1 && j % 2) v = cap + 5;    // outside the cache: skipped, never read
        if (b == c.B - 1 && i == 0) v = -1;  // an all-invalid row
        idx.set((int64_t(b) * c.s_q + i) * c.topk + j, double(v));
      }
  }
  const float scale = 0.1352f;
  // device
  void* dkv = nullptr;
  const size_t kv_bytes = cache.storage.size() * 8;
  MLA_CUDA_CHECK(cudaMalloc(&dkv, kv_bytes));
  MLA_CUDA_CHECK(cudaMemcpy(dkv, cache.storage.data(), kv_bytes, cudaMemcpyHostToDevice));
  DeviceBuffer dq(q), didx(idx), dtl(tl);
  HostTensor out(DType::bf16, {c.B, c.s_q, c.h, 512}), lse(DType::f32, {c.B, c.h, c.s_q});
  DeviceBuffer dout(out), dlse(lse);
  dout.poison(), dlse.poison();
  dsa::SparseAttnParams p;
  p.q = dq.get(), p.q_sb = int64_t(c.s_q) * c.h * 576, p.q_ss = int64_t(c.h) * 576, p.q_sh = 576;
  p.batch = c.B, p.s_q = c.s_q, p.h_q = c.h;
  p.indices = static_cast<const int32_t*>(didx.get()), p.idx_sb = int64_t(c.s_q) * c.topk,
  p.idx_ss = c.topk;
  p.topk = c.topk;
  p.topk_length = c.use_topk_length ? static_cast<const int32_t*>(dtl.get()) : nullptr;
  p.kv = static_cast<const uint8_t*>(dkv), p.fp8 = c.format == KvFormat::fp8_ds_mla;
  const int64_t esz = p.fp8 ? 1 : 2;
  p.page_stride = cache.page_stride() * esz, p.token_stride = cache.entry_elems() * esz,
  p.page_size = c.page;
  p.num_slots = cap, p.softmax_scale = scale;
  p.out = dout.get(), p.out_sb = int64_t(c.s_q) * c.h * 512, p.out_ss = int64_t(c.h) * 512,
  p.out_sh = 512;
  p.lse = static_cast<float*>(dlse.get()), p.lse_sb = int64_t(c.h) * c.s_q, p.lse_sh = c.s_q,
  p.lse_ss = 1;
  void* ws = nullptr;
  if (c.via_api) {
    SparseDecodeArgs a;
    a.q = dq.view(q);
    a.kv = cache.view(Device::cuda(0));
    a.kv.data.data = dkv;
    a.indices = didx.view(idx);
    if (c.use_topk_length) a.topk_length = dtl.view(tl);
    a.softmax_scale = scale, a.out = dout.view(out), a.lse = dlse.view(lse);
    size_t need = 0;
    ASSERT_MLA_OK(sparse_workspace_size(a, &need));
    size_t kernel_need = dsa::sparse_attn_workspace_size(p);
    if (mla::cuda::decode::sparse_wgmma_chosen(p))
      ASSERT_MLA_OK(mla::cuda::decode::sparse_wgmma_workspace_size(p, &kernel_need));
    EXPECT_EQ(need, kernel_need) << "the API sizes what the kernel uses";
    if (need) {
      MLA_CUDA_CHECK(cudaMalloc(&ws, need));
      const Status st = sparse_decode(a, Workspace{ws, need - 1});
      EXPECT_EQ(st.code(), Errc::insufficient_workspace) << st.to_string();
      EXPECT_NE(st.message().find(std::to_string(need)), std::string::npos) << st.message();
    }
    ASSERT_MLA_OK(sparse_decode(a, Workspace{ws, need}));
  } else if (c.wgmma) {
    size_t ws_bytes = 0;
    ASSERT_MLA_OK(mla::cuda::decode::sparse_wgmma_workspace_size(p, &ws_bytes));
    MLA_CUDA_CHECK(cudaMalloc(&ws, ws_bytes));
    ASSERT_MLA_OK(mla::cuda::decode::launch_sparse_wgmma(p, ws, ws_bytes, nullptr));
  } else {
    const size_t ws_bytes = c.split ? dsa::sparse_attn_workspace_size(p) : 0;
    if (ws_bytes) MLA_CUDA_CHECK(cudaMalloc(&ws, ws_bytes));
    ASSERT_MLA_OK(dsa::launch_sparse_attn(p, ws, ws_bytes, nullptr));
  }
  MLA_CUDA_CHECK(cudaDeviceSynchronize());
  dout.to_host(out), dlse.to_host(lse);
  cudaFree(ws);
  cudaFree(dkv);
  // compare: bf16 P and bf16 output; error of the output relative to its norm
  double err2 = 0, ref2 = 0, lse_err = 0;
  int bad_inf = 0;
  for (int b = 0; b < c.B; ++b)
    for (int i = 0; i < c.s_q; ++i) {
      std::vector<int32_t> list;
      const int n = c.use_topk_length ? int(tl.get(b)) : c.topk;
      for (int j = 0; j < std::min(n, c.topk); ++j)
        list.push_back(int32_t(idx.get((int64_t(b) * c.s_q + i) * c.topk + j)));
      std::vector<double> ro, rl;
      sparse_oracle(cache, list, q, (int64_t(b) * c.s_q + i) * c.h * 576, c.h, scale, &ro, &rl);
      for (int h = 0; h < c.h; ++h) {
        const double gl = lse.get((int64_t(b) * c.h + h) * c.s_q + i);
        if (std::isinf(rl[h])) {
          bad_inf += !(std::isinf(gl) && gl < 0);
        } else {
          lse_err = std::max(lse_err, std::isfinite(gl) ? std::fabs(gl - rl[h]) : 1e9);
        }
        for (int d = 0; d < 512; ++d) {
          const double g = out.get(((int64_t(b) * c.s_q + i) * c.h + h) * 512 + d),
                       r = ro[h * 512 + d];
          err2 += std::isfinite(g) ? (g - r) * (g - r) : 1e9;
          ref2 += r * r;
        }
      }
    }
  const double rel = std::sqrt(err2 / std::max(ref2, 1e-30));
  // bf16 P (8 bits) and bf16 output rounding: ~2^-9 per element -> 1e-2 norm bound
  EXPECT_LT(rel, 1e-2) << kv_format_name(c.format) << " h " << c.h << " s_q " << c.s_q << " topk "
                       << c.topk;
  EXPECT_LT(lse_err, 1e-3) << "lse";
  EXPECT_EQ(bad_inf, 0) << "rows with no key must give lse -inf";
}

TEST(DsaGpu, SparseAttentionMatchesReference) {
  Rng rng(107);
  for (KvFormat f : {KvFormat::bf16, KvFormat::fp8_ds_mla})
    for (int h : {16, 32, 64, 128}) {
      run_sparse_case(rng, {f, 3, 2, h, 128, 64, true, false});
      run_sparse_case(rng, {f, 2, 1, h, 192, 16, false, true});
    }
  run_sparse_case(rng, {KvFormat::bf16, 2, 4, 64, 64, 1, true, true});
  run_sparse_case(rng, {KvFormat::fp8_ds_mla, 2, 3, 128, 256, 128, false, true});
}

// Sparse v2: the same grid on the wgmma decode kernel with the Indexed key
// source (src/cuda/decode/decode_sparse.hpp), heads 16/32 as masked rows of a
// 64-row CTA; topk not a multiple of the 64-key tile; s_q 1 to 4; pages 1 to 128.
TEST(DsaGpu, SparseWgmmaMatchesReference) {
  Rng rng(112);
  auto run = [&](SparseCase c) {
    c.wgmma = true;
    run_sparse_case(rng, c);
  };
  for (KvFormat f : {KvFormat::bf16, KvFormat::fp8_ds_mla})
    for (int h : {16, 32, 64, 128}) {
      run({f, 3, 2, h, 128, 64, true, true});
      run({f, 2, 1, h, 200, 16, false, true});
    }
  run({KvFormat::bf16, 2, 4, 64, 64, 1, true, true});
  run({KvFormat::fp8_ds_mla, 2, 3, 128, 256, 128, false, true});
  run({KvFormat::bf16, 150, 1, 128, 100, 64, true, true});  // more tokens than workers
}

// The API forced onto each kernel (MLA_SPARSE_KERNEL), 16 to 128 heads.
TEST(DsaGpu, SparseDecodeApiForcedKernels) {
  Rng rng(113);
  for (const char* k : {"wgmma", "mma"}) {
    ASSERT_EQ(setenv("MLA_SPARSE_KERNEL", k, 1), 0);
    run_sparse_case(rng, {KvFormat::fp8_ds_mla, 2, 4, 16, 128, 128, true, true, true});
    run_sparse_case(rng, {KvFormat::bf16, 40, 3, 32, 64, 16, true, true, true});
    run_sparse_case(rng, {KvFormat::bf16, 2, 1, 128, 256, 64, true, true, true});
  }
  unsetenv("MLA_SPARSE_KERNEL");
}

// The public API (mla::sparse_decode) on CUDA tensors: page sizes 1 to 128,
// few rows (split over CTAs: needs the workspace) and many.
TEST(DsaGpu, SparseDecodeApiMatchesReference) {
  Rng rng(110);
  run_sparse_case(rng, {KvFormat::bf16, 2, 1, 128, 256, 64, true, true, true});
  run_sparse_case(rng, {KvFormat::fp8_ds_mla, 3, 2, 64, 192, 1, false, true, true});
  run_sparse_case(rng, {KvFormat::fp8_ds_mla, 2, 4, 16, 128, 128, true, true, true});
  run_sparse_case(rng, {KvFormat::bf16, 40, 3, 32, 64, 16, true, true, true});
}

// mla::sparse_prefill on CUDA tensors against the same API on CPU tensors
// (the fp64 reference). Index lists: random rows of kv with 1 in 8 entries -1,
// row 1 all -1 (out 0, lse -inf), row 2 with only its first 3 entries valid,
// row 3 holding one row of kv `topk` times (duplicates count, as in the
// reference). The kernel is the API's default (the wgmma decode kernel) or
// forced through MLA_SPARSE_KERNEL ("mma": sparse_attn.cu's kernel); each also
// in launches of 3 query tokens (MLA_SPARSE_PREFILL_CHUNK: the path of s_q past
// 65535, whose chunk offsets and workspace sizing a real s_q that long would
// need > 1 GB of q to test).
struct PrefillCase {
  int h, s_q, s_kv, topk;
};

// The reference runs once per case; every kernel is checked against it.
void run_prefill_case(Rng& rng, const PrefillCase& c) {
  struct EnvReset {  // an ASSERT leaving early must not leave a kernel forced for later tests
    ~EnvReset() { unsetenv("MLA_SPARSE_KERNEL"), unsetenv("MLA_SPARSE_PREFILL_CHUNK"); }
  } env_reset;
  const int h = c.h, s_q = c.s_q, s_kv = c.s_kv, topk = c.topk;
  HostTensor q = random_tensor(rng, DType::bf16, {s_q, h, 576}, -2, 2);
  HostTensor kv = random_tensor(rng, DType::bf16, {s_kv, 576}, -2, 2);
  HostTensor idx(DType::i32, {s_q, topk});
  for (int i = 0; i < s_q; ++i)
    for (int j = 0; j < topk; ++j) {
      double v = double(rng.randint(0, s_kv - 1));
      if (i == 1 || (i == 2 && j >= 3) || rng.randint(0, 7) == 0) v = -1.0;
      if (i == 3) v = double(s_kv - 1);
      idx.set(int64_t(i) * topk + j, v);
    }
  HostTensor ro(DType::f64, {s_q, h, 512}), rl(DType::f64, {s_q, h});
  SparsePrefillArgs ra;
  ra.q = q.view(), ra.kv = kv.view(), ra.indices = idx.view(), ra.softmax_scale = 0.0625f;
  ra.out = ro.view(), ra.lse = rl.view();
  ASSERT_MLA_OK(sparse_prefill(ra));
  for (const char* kernel : {"default", "mma"})
    for (const char* chunk : {"", "3"}) {  // "3": launches of 3 query tokens (the chunked path)
      SCOPED_TRACE(::testing::Message() << "kernel " << kernel << " chunk '" << chunk << "' h " << h
                                        << " s_q " << s_q << " s_kv " << s_kv << " topk " << topk);
      if (std::string(kernel) == "default")
        unsetenv("MLA_SPARSE_KERNEL");
      else
        ASSERT_EQ(setenv("MLA_SPARSE_KERNEL", kernel, 1), 0);
      if (*chunk)
        ASSERT_EQ(setenv("MLA_SPARSE_PREFILL_CHUNK", chunk, 1), 0);
      else
        unsetenv("MLA_SPARSE_PREFILL_CHUNK");
      HostTensor out(DType::bf16, {s_q, h, 512}), lse(DType::f32, {s_q, h});
      DeviceBuffer dq(q), dkv(kv), didx(idx), dout(out), dlse(lse);
      dout.poison(), dlse.poison();
      SparsePrefillArgs a = ra;
      a.q = dq.view(q), a.kv = dkv.view(kv), a.indices = didx.view(idx), a.out = dout.view(out),
      a.lse = dlse.view(lse);
      size_t need = 0;
      ASSERT_MLA_OK(sparse_workspace_size(a, &need));
      void* ws = nullptr;
      if (need) MLA_CUDA_CHECK(cudaMalloc(&ws, need));
      if (need) {  // the size is what the call uses: one byte less is an error, before any launch
        const Status st = sparse_prefill(a, Workspace{ws, need - 1});
        EXPECT_EQ(st.code(), Errc::insufficient_workspace) << st.to_string();
      }
      ASSERT_MLA_OK(sparse_prefill(a, Workspace{ws, need}));
      MLA_CUDA_CHECK(cudaDeviceSynchronize());
      dout.to_host(out), dlse.to_host(lse);
      // A second call gives the same bits (no split depends on timing).
      HostTensor out2(DType::bf16, {s_q, h, 512}), lse2(DType::f32, {s_q, h});
      dout.poison(), dlse.poison();
      ASSERT_MLA_OK(sparse_prefill(a, Workspace{ws, need}));
      MLA_CUDA_CHECK(cudaDeviceSynchronize());
      cudaFree(ws);
      dout.to_host(out2), dlse.to_host(lse2);
      EXPECT_TRUE(same_bytes(out, out2) && same_bytes(lse, lse2)) << "a second call differs";
      double err2 = 0, ref2 = 0, lerr = 0;
      int bad_inf = 0, bad_zero = 0;
      for (int64_t i = 0; i < out.numel(); ++i) {
        const double d = out.get(i) - ro.get(i);
        err2 += std::isfinite(d) ? d * d : 1e9, ref2 += ro.get(i) * ro.get(i);
      }
      if (s_q > 1)
        for (int64_t i = 0; i < int64_t(h) * 512; ++i)
          bad_zero += out.get(int64_t(h) * 512 + i) != 0.0;
      for (int64_t i = 0; i < lse.numel(); ++i) {
        if (std::isinf(rl.get(i)))
          bad_inf += !(std::isinf(lse.get(i)) && lse.get(i) < 0);
        else
          lerr =
              std::max(lerr, std::isfinite(lse.get(i)) ? std::fabs(lse.get(i) - rl.get(i)) : 1e9);
      }
      // bf16 P and bf16 output (as the decode cases): 1e-2 of the norm; lse is
      // accumulated in f32 over <= 2048 terms.
      EXPECT_LT(std::sqrt(err2 / ref2), 1e-2);
      EXPECT_LT(lerr, 1e-3);
      EXPECT_EQ(bad_inf, 0) << "the all-invalid row must give lse -inf";
      EXPECT_EQ(bad_zero, 0) << "the all-invalid row must give out 0";
    }
}

TEST(DsaGpu, SparsePrefillApiMatchesReference) {
  Rng rng(111);
  const PrefillCase cases[] = {
      {16, 300, 777, 192},   // more tokens than workers, topk a multiple of 64
      {64, 5, 777, 192},     // few tokens: split over workers (fp32 partials)
      {128, 5, 777, 192},    // two row blocks of 64 heads
      {128, 6, 40, 100},     // s_kv below topk (repeats), topk not a multiple of 64
      {32, 4, 1, 7},         // a one-row kv, a list shorter than one tile
      {64, 8, 70000, 2048},  // DeepSeek-V3.2's top-2048, kv rows past 65536
      {128, 150, 4096, 64},  // one tile per token, 150 tokens > 66 workers
  };
  for (const PrefillCase& c : cases) run_prefill_case(rng, c);
}

// What the CUDA path cannot take is an error naming the argument, before any launch.
TEST(DsaGpu, SparseApiRejectsWhatTheKernelCannotTake) {
  HostTensor q(DType::bf16, {1, 20, 576}), kv(DType::bf16, {8, 576}), idx(DType::i32, {1, 4});
  HostTensor out(DType::bf16, {1, 20, 512}), lse(DType::f32, {1, 20});
  DeviceBuffer dq(q), dkv(kv), didx(idx), dout(out), dlse(lse);
  SparsePrefillArgs a;
  a.q = dq.view(q), a.kv = dkv.view(kv), a.indices = didx.view(idx), a.softmax_scale = 0.1f;
  a.out = dout.view(out), a.lse = dlse.view(lse);
  Status st = sparse_prefill(a);
  EXPECT_EQ(st.code(), Errc::unsupported) << st.to_string();
  EXPECT_NE(st.message().find("h_q = 20"), std::string::npos) << st.message();
  HostTensor q16(DType::bf16, {1, 16, 576}), out16(DType::f32, {1, 16, 512}),
      lse16(DType::f32, {1, 16});
  DeviceBuffer dq16(q16), dout16(out16), dlse16(lse16);
  a.q = dq16.view(q16), a.out = dout16.view(out16), a.lse = dlse16.view(lse16);
  st = sparse_prefill(a);
  EXPECT_EQ(st.code(), Errc::unsupported) << st.to_string();
  EXPECT_NE(st.message().find("out: dtype f32"), std::string::npos) << st.message();
}

TEST(DsaGpu, SparseRejectsHeadsNotMultipleOf16) {
  dsa::SparseAttnParams p;
  p.batch = 1, p.h_q = 20;
  Status st = dsa::launch_sparse_attn(p, nullptr, 0, nullptr);
  EXPECT_EQ(st.code(), Errc::invalid_value) << st.to_string();
}

// Sparse attention with a list holding every key equals dense decode.
TEST(DsaGpu, SparseWithAllKeysEqualsDenseDecode) {
  Rng rng(108);
  for (bool wgmma : {false, true})  // sparse_attn.cu's kernel, then the wgmma decode kernel
    for (KvFormat f : {KvFormat::bf16, KvFormat::fp8_ds_mla}) {
      const int B = 2, h = 64, L = 300, topk = 320;
      testing::PagedCacheSpec spec;
      spec.format = f, spec.page_size = 64;
      testing::PagedCache cache = testing::make_paged_cache(rng, {L, L - 17}, spec);
      HostTensor q = random_tensor(rng, DType::bf16, {B, 1, h, 576}, -2, 2);
      HostTensor idx(DType::i32, {B, 1, topk});
      for (int b = 0; b < B; ++b)
        for (int j = 0; j < topk; ++j)
          idx.set(b * topk + j, j < cache.seqlens[b] ? double(cache.slot(b, j)) : -1.0);
      HostTensor dense_o(DType::f32, {B, 1, h, 512}), dense_l(DType::f32, {B, h, 1});
      DecodeArgs a;
      a.q = q.view(), a.kv = cache.view(), a.block_table = cache.block_table_view(),
      a.cache_seqlens = cache.seqlens_view();
      a.softmax_scale = 0.1352f, a.causal = true, a.out = dense_o.view(), a.lse = dense_l.view();
      ASSERT_MLA_OK(reference::mla_decode(a));
      void* dkv = nullptr;
      MLA_CUDA_CHECK(cudaMalloc(&dkv, cache.storage.size() * 8));
      MLA_CUDA_CHECK(
          cudaMemcpy(dkv, cache.storage.data(), cache.storage.size() * 8, cudaMemcpyHostToDevice));
      DeviceBuffer dq(q), didx(idx);
      HostTensor out(DType::bf16, {B, 1, h, 512}), lse(DType::f32, {B, h, 1});
      DeviceBuffer dout(out), dlse(lse);
      dout.poison(), dlse.poison();
      dsa::SparseAttnParams p;
      p.q = dq.get(), p.q_sb = h * 576, p.q_ss = h * 576, p.q_sh = 576, p.batch = B, p.s_q = 1,
      p.h_q = h;
      p.indices = static_cast<const int32_t*>(didx.get()), p.idx_sb = topk, p.idx_ss = topk,
      p.topk = topk;
      p.kv = static_cast<const uint8_t*>(dkv), p.fp8 = f == KvFormat::fp8_ds_mla;
      const int64_t esz = p.fp8 ? 1 : 2;
      p.page_stride = cache.page_stride() * esz, p.token_stride = cache.entry_elems() * esz,
      p.page_size = 64;
      p.num_slots = cache.num_pages * 64, p.softmax_scale = 0.1352f;
      p.out = dout.get(), p.out_sb = h * 512, p.out_ss = h * 512, p.out_sh = 512;
      p.lse = static_cast<float*>(dlse.get()), p.lse_sb = h, p.lse_sh = 1, p.lse_ss = 1;
      void* ws = nullptr;
      if (wgmma) {
        size_t ws_bytes = 0;
        ASSERT_MLA_OK(mla::cuda::decode::sparse_wgmma_workspace_size(p, &ws_bytes));
        MLA_CUDA_CHECK(cudaMalloc(&ws, ws_bytes));
        ASSERT_MLA_OK(mla::cuda::decode::launch_sparse_wgmma(p, ws, ws_bytes, nullptr));
      } else {
        ASSERT_MLA_OK(dsa::launch_sparse_attn(p, nullptr, 0, nullptr));
      }
      MLA_CUDA_CHECK(cudaDeviceSynchronize());
      dout.to_host(out), dlse.to_host(lse);
      cudaFree(dkv);
      cudaFree(ws);
      double err2 = 0, ref2 = 0, lerr = 0;
      for (int64_t i = 0; i < out.numel(); ++i) {
        const double d = out.get(i) - dense_o.get(i);
        err2 += std::isfinite(d) ? d * d : 1e9, ref2 += dense_o.get(i) * dense_o.get(i);
      }
      for (int64_t i = 0; i < lse.numel(); ++i)
        lerr = std::max(lerr, std::fabs(lse.get(i) - dense_l.get(i)));
      EXPECT_LT(std::sqrt(err2 / ref2), 1e-2) << kv_format_name(f) << (wgmma ? " wgmma" : " mma");
      EXPECT_LT(lerr, 1e-3) << kv_format_name(f) << (wgmma ? " wgmma" : " mma");
    }
}

}  // namespace
}  // namespace mla
