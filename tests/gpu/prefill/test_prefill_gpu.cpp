// GPU tests of the non-absorbed prefill path (src/cuda/prefill) against the
// fp64 CPU reference: attention (varlen, causal bottom-right, ragged batches,
// 16 to 128 heads, queries that see no key), the cuBLAS decompression, and the
// chunked prefill over a paged cache (bf16 and fp8 entries, page sizes 1..128,
// chunk sizes that do not divide the length). Fresh random inputs, outputs
// poisoned with NaN before every run, every element checked.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/random.hpp"
#include "cuda/prefill/chunked_prefill.hpp"
#include "cuda/prefill/decompress_gemm.hpp"
#include "cuda/prefill/flash_fwd.hpp"
#include "gpu/gpu_buffer.hpp"
#include "mla/dims.hpp"
#include "mla/kv_cache.hpp"
#include "mla/prefill.hpp"

namespace mla {
namespace {

using testing::HostTensor;
using testing::random_tensor;
using testing::Rng;

using testing::DeviceBuffer;
// Size-only buffers get a real allocation even at 0 bytes (empty batches still
// pass a device address), as mirrors of HostTensors do.
constexpr auto kAlloc = DeviceBuffer::Empty::kAllocate;

// ---- fp64 reference of the non-absorbed attention (docs/design.md section 1.2) ----
// q [T, h, 192], k [Tk, h, 192], v [Tk, h, 128] as doubles; varlen by offsets;
// causal bottom-right: query i of a sequence sees keys j <= i + (Tk - Tq).
// A query that sees no key: out 0, lse -inf.
void reference_mha(const std::vector<double>& q, const std::vector<double>& k,
                   const std::vector<double>& v, const std::vector<int>& cu_q,
                   const std::vector<int>& cu_k, int h, double scale, bool causal,
                   std::vector<double>& out, std::vector<double>& lse) {
  const int T = cu_q.back();
  out.assign(size_t(T) * h * 128, 0.0);
  lse.assign(size_t(h) * T, -INFINITY);
  // Heads are independent: one host thread per head keeps the fp64 oracle fast.
  auto one_head = [&](int hd) {
    std::vector<double> s;
    for (size_t b = 0; b + 1 < cu_q.size(); ++b) {
      const int tq = cu_q[b + 1] - cu_q[b], tk = cu_k[b + 1] - cu_k[b];
      for (int i = 0; i < tq; ++i) {
        const int n = causal ? std::min(tk, std::max(0, i + (tk - tq) + 1)) : tk;
        if (n == 0) continue;
        const double* qi = &q[(size_t(cu_q[b] + i) * h + hd) * 192];
        s.assign(n, 0.0);
        double m = -INFINITY;
        for (int j = 0; j < n; ++j) {
          const double* kj = &k[(size_t(cu_k[b] + j) * h + hd) * 192];
          double d = 0;
          for (int c = 0; c < 192; ++c) d += qi[c] * kj[c];
          s[j] = d * scale;
          m = std::max(m, s[j]);
        }
        double l = 0;
        for (int j = 0; j < n; ++j) l += (s[j] = std::exp(s[j] - m));
        double* o = &out[(size_t(cu_q[b] + i) * h + hd) * 128];
        for (int j = 0; j < n; ++j) {
          const double* vj = &v[(size_t(cu_k[b] + j) * h + hd) * 128];
          for (int c = 0; c < 128; ++c) o[c] += s[j] / l * vj[c];
        }
        lse[size_t(hd) * T + cu_q[b] + i] = m + std::log(l);
      }
    }
  };
  std::vector<std::thread> pool;
  for (int hd = 0; hd < h; ++hd) pool.emplace_back(one_head, hd);
  for (auto& t : pool) t.join();
}

std::vector<double> as_doubles(const HostTensor& t) {
  std::vector<double> r(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) r[i] = t.get(i);
  return r;
}

// Errors: out is bf16 (rounding 2^-9 relative) and P enters the P.V product as
// bf16 (2^-9 relative per weight): the relative L2 error of a row stays well
// under 1e-2; 1e-2 is the bound METHOD.md gives for bf16 operands. lse comes
// from f32 scores of bf16 inputs (exactly the reference's inputs): its error is
// f32 rounding over 192-term dots and exp/log, far under 2e-3 absolute.
void expect_close(const HostTensor& out, const std::vector<double>& ref_out, const HostTensor& lse,
                  const std::vector<double>& ref_lse, const char* what, double lse_tol = 2e-3) {
  double num = 0, den = 0;
  int64_t bad = 0;
  for (int64_t i = 0; i < out.numel(); ++i) {
    const double g = out.get(i);
    if (!std::isfinite(g)) ++bad;
    num += (g - ref_out[i]) * (g - ref_out[i]);
    den += ref_out[i] * ref_out[i];
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " output elements not finite (unwritten?)";
  EXPECT_LT(std::sqrt(num / std::max(den, 1e-30)), 1e-2) << what;
  int64_t lse_bad = 0;
  double worst = 0;
  for (int64_t i = 0; i < lse.numel(); ++i) {
    const double g = lse.get(i), r = ref_lse[i];
    if (std::isinf(r)) {
      if (!(std::isinf(g) && g < 0)) ++lse_bad;
    } else if (!(std::fabs(g - r) <= lse_tol)) {
      ++lse_bad;
      worst = std::max(worst, std::fabs(g - r));
    }
  }
  EXPECT_EQ(lse_bad, 0) << what << ": lse mismatches, worst |err| " << worst;
}

struct AttnCase {
  int h;
  std::vector<int> len_q, len_k;
  bool causal;
  bool shared_rope;  // k_rope [Tk, 64] shared by the heads vs a full k [Tk, h, 192]
};

// Every attention kernel, then the chosen one (nullopt), and the name of a run of one.
std::vector<std::optional<cuda::prefill::Kernel>> kernels_then_chosen() {
  std::vector<std::optional<cuda::prefill::Kernel>> kernels(std::begin(cuda::prefill::kAllKernels),
                                                            std::end(cuda::prefill::kAllKernels));
  kernels.push_back(std::nullopt);
  return kernels;
}
std::string run_name(const char* what, std::optional<cuda::prefill::Kernel> kernel) {
  return std::string(what) + " (" + (kernel ? kernel_name(*kernel) : "chosen") + ")";
}

void run_attention_case(const AttnCase& c, uint64_t seed) {
  Rng rng(seed);
  std::vector<int> cu_q{0}, cu_k{0};
  int max_q = 0;
  for (size_t b = 0; b < c.len_q.size(); ++b) {
    cu_q.push_back(cu_q.back() + c.len_q[b]);
    cu_k.push_back(cu_k.back() + c.len_k[b]);
    max_q = std::max(max_q, c.len_q[b]);
  }
  const int T = cu_q.back(), Tk = cu_k.back(), h = c.h;
  HostTensor q = random_tensor(rng, DType::bf16, {T, h, 192});
  HostTensor kfull = random_tensor(rng, DType::bf16, {Tk, h, 192});
  HostTensor rope = random_tensor(rng, DType::bf16, {Tk, 64});
  HostTensor v = random_tensor(rng, DType::bf16, {Tk, h, 128});
  if (c.shared_rope)  // the reference sees the rope copied into every head
    for (int j = 0; j < Tk; ++j)
      for (int hd = 0; hd < h; ++hd)
        for (int r = 0; r < 64; ++r)
          kfull.set((int64_t(j) * h + hd) * 192 + 128 + r, rope.get(int64_t(j) * 64 + r));
  HostTensor cq(DType::i32, {int64_t(cu_q.size())}), ck(DType::i32, {int64_t(cu_k.size())});
  for (size_t i = 0; i < cu_q.size(); ++i) cq.set(i, cu_q[i]), ck.set(i, cu_k[i]);

  DeviceBuffer dq(q), dk(kfull), drope(rope), dv(v), dcq(cq), dck(ck);
  DeviceBuffer dout(size_t(T) * h * 128 * 2, kAlloc), dlse(size_t(h) * T * 4, kAlloc);
  dout.poison();
  dlse.poison();
  const double scale = deepseek_v32_softmax_scale();
  cuda::prefill::FlashFwdParams p;
  // [rows, heads, width] tensors: the address and the row and head strides (elements).
  auto place = [](auto*& ptr, int64_t& row_stride, int64_t& head_stride, void* data, int64_t row,
                  int64_t head) {
    ptr = data;
    row_stride = row;
    head_stride = head;
  };
  place(p.q, p.q_row_stride, p.q_head_stride, dq.get(), int64_t(h) * 192, 192);
  place(p.k_nope, p.k_nope_row_stride, p.k_nope_head_stride, dk.get(), int64_t(h) * 192, 192);
  if (c.shared_rope)  // one rope vector per token, for every head
    place(p.k_rope, p.k_rope_row_stride, p.k_rope_head_stride, drope.get(), 64, 0);
  else  // the last 64 of each head's 192 values
    place(p.k_rope, p.k_rope_row_stride, p.k_rope_head_stride,
          static_cast<char*>(dk.get()) + 128 * 2, int64_t(h) * 192, 192);
  place(p.v, p.v_row_stride, p.v_head_stride, dv.get(), int64_t(h) * 128, 128);
  place(p.out, p.out_row_stride, p.out_head_stride, dout.get(), int64_t(h) * 128, 128);
  p.lse = static_cast<float*>(dlse.get());
  p.lse_head_stride = T;
  p.cu_seqlens_q = static_cast<const int32_t*>(dcq.get());
  p.cu_seqlens_k = static_cast<const int32_t*>(dck.get());
  p.batch = int(c.len_q.size());
  p.heads = h;
  p.max_seqlen_q = max_q;
  p.total_q = T;
  p.total_k = Tk;
  p.softmax_scale = float(scale);
  p.causal = c.causal;
  std::vector<double> ref_out, ref_lse;
  reference_mha(as_doubles(q), as_doubles(kfull), as_doubles(v), cu_q, cu_k, h,
                double(float(scale)), c.causal, ref_out, ref_lse);
  // Every kernel, then the chosen one, each on freshly poisoned outputs.
  using cuda::prefill::Kernel;
  for (const std::optional<Kernel>& kernel : kernels_then_chosen()) {
    const std::string what = run_name("attention", kernel);
    dout.poison();
    dlse.poison();
    if (kernel == Kernel::tma_warp_specialized && Tk == 0) {
      // No key at all: no TMA map can describe an empty tensor; the forced TMA
      // kernel refuses (the chosen one falls back to cp_async_wgmma, checked).
      const Status st = cuda::prefill::launch_flash_fwd(p, nullptr, kernel);
      EXPECT_EQ(st.code(), Errc::unsupported) << st.message();
      continue;
    }
    ASSERT_MLA_OK(cuda::prefill::launch_flash_fwd(p, nullptr, kernel));
    MLA_CUDA_CHECK(cudaDeviceSynchronize());
    HostTensor out(DType::bf16, {T, h, 128}), lse(DType::f32, {h, T});
    dout.to_host(out);
    dlse.to_host(lse);
    expect_close(out, ref_out, lse, ref_lse, what.c_str());
    if (kernel == Kernel::tma_warp_specialized) {
      // The pipelined kernel's reductions have a fixed order: repeated calls
      // give the same bytes (a race in the barrier ring would show here).
      const auto first_out = dout.download<uint16_t>(size_t(T) * h * 128);
      const auto first_lse = dlse.download<uint32_t>(size_t(h) * T);
      for (int rep = 0; rep < 20; ++rep) {
        dout.poison();
        dlse.poison();
        ASSERT_MLA_OK(cuda::prefill::launch_flash_fwd(p, nullptr, kernel));
        MLA_CUDA_CHECK(cudaDeviceSynchronize());
        ASSERT_EQ(dout.download<uint16_t>(first_out.size()), first_out) << "repeat " << rep;
        ASSERT_EQ(dlse.download<uint32_t>(first_lse.size()), first_lse) << "repeat " << rep;
      }
    }
  }
}

TEST(PrefillGpu, AttentionSingleSequenceLengths) {
  // 1, below a tile, not a multiple of 64 or 128, one past a tile, ~2K.
  uint64_t seed = 100;
  for (int L : {1, 7, 64, 129, 300, 2047}) run_attention_case({16, {L}, {L}, true, true}, seed++);
}

TEST(PrefillGpu, AttentionRaggedBatchWithPrefixes) {
  // Keys longer than queries: the queries are the last tokens (bottom-right mask).
  run_attention_case({16, {1, 77, 300, 129, 5}, {1, 82, 300, 329, 1000}, true, true}, 200);
}

TEST(PrefillGpu, AttentionHeadCounts) {
  run_attention_case({32, {130, 60}, {130, 60}, true, true}, 300);
  run_attention_case({64, {200}, {250}, true, false}, 301);
  run_attention_case({128, {190, 33}, {190, 40}, true, true}, 302);
}

TEST(PrefillGpu, AttentionNonCausal) {
  run_attention_case({16, {100, 257}, {333, 64}, false, false}, 400);
}

TEST(PrefillGpu, QueriesThatSeeNoKeyGetZeroAndMinusInf) {
  // Tk < Tq: the first Tq - Tk queries see nothing; an empty key set too.
  run_attention_case({16, {200, 10}, {50, 0}, true, true}, 500);
  run_attention_case({16, {37, 5}, {0, 0}, false, true}, 501);  // no key in the whole batch
}

TEST(PrefillGpu, DecompressionMatchesFp64) {
  Rng rng(600);
  const int N = 333, h = 16;
  HostTensor ckv = random_tensor(rng, DType::bf16, {N, 512});
  HostTensor w = random_tensor(rng, DType::bf16, {h, 128, 512}, -0.05, 0.05);
  DeviceBuffer dckv(ckv), dw(w), dout(size_t(N) * h * 128 * 2, kAlloc);
  dout.poison();
  cuda::prefill::DecompressGemm g{dckv.get(),       512, dw.get(), dout.get(),
                                  int64_t(h) * 128, N,   h * 128,  512};
  ASSERT_MLA_OK(cuda::prefill::decompress_gemm(g, nullptr));
  MLA_CUDA_CHECK(cudaDeviceSynchronize());
  HostTensor out(DType::bf16, {N, h, 128});
  dout.to_host(out);
  double worst = 0;
  for (int n = 0; n < N; ++n)
    for (int r = 0; r < h * 128; ++r) {
      double ref = 0, mag = 0;
      for (int c = 0; c < 512; ++c) {
        ref += ckv.get(int64_t(n) * 512 + c) * w.get(int64_t(r) * 512 + c);
        mag += std::fabs(ckv.get(int64_t(n) * 512 + c) * w.get(int64_t(r) * 512 + c));
      }
      // bf16 output rounding (2^-9 of |ref|) plus f32 accumulation (512 * 2^-24 of sum|terms|).
      const double err = std::fabs(out.get(int64_t(n) * h * 128 + r) - ref);
      const double bound = std::ldexp(std::fabs(ref), -8) + 512 * std::ldexp(mag, -23) + 1e-30;
      worst = std::max(worst, err / bound);
    }
  EXPECT_LE(worst, 1.0) << "worst error / bound";
}

// ---- chunked prefill over a paged cache ----
struct ChunkCase {
  int h, page, T, L, chunk;
  KvFormat format;
};

void run_chunked_case(const ChunkCase& c, uint64_t seed) {
  Rng rng(seed);
  const int h = c.h, T = c.T, L = c.L, page = c.page;
  const int n_pages = (L + page - 1) / page + 3;  // spare pages stay garbage
  const int entry = kv_entry_bytes(c.format);
  // Host cache: garbage everywhere, then the L tokens appended at shuffled pages.
  HostTensor cache(c.format == KvFormat::bf16 ? DType::bf16 : DType::u8,
                   {n_pages, page, 1, c.format == KvFormat::bf16 ? 576 : entry});
  cache.poison();
  std::vector<int> pages(n_pages);
  for (int i = 0; i < n_pages; ++i) pages[i] = i;
  rng.shuffle(pages);
  HostTensor bt(DType::i32, {n_pages});
  for (int i = 0; i < n_pages; ++i) bt.set(i, pages[i]);
  HostTensor ckv = random_tensor(rng, DType::f32, {L, 512});
  HostTensor rope = random_tensor(rng, DType::f32, {L, 64});
  HostTensor slots(DType::i64, {L});
  for (int s = 0; s < L; ++s) slots.set(s, double(int64_t(pages[s / page]) * page + s % page));
  KvCacheView cv{cache.view(), c.format};
  ASSERT_MLA_OK(append_kv({ckv.view(), rope.view(), slots.view(), cv}));
  // What the cache holds, dequantised: the reference's K/V source.
  HostTensor ckv_back(DType::f32, {L, 512}), rope_back(DType::f32, {L, 64});
  ASSERT_MLA_OK(read_kv({cv, slots.view(), ckv_back.view(), rope_back.view()}));

  HostTensor q = random_tensor(rng, DType::bf16, {T, h, 192});
  // Weights ~ 1/sqrt(512) so that k_nope and v stay O(1).
  HostTensor wuk = random_tensor(rng, DType::bf16, {h, 128, 512}, -0.08, 0.08);
  HostTensor wuv = random_tensor(rng, DType::bf16, {h, 128, 512}, -0.08, 0.08);

  DeviceBuffer dq(q), dcache(cache), dbt(bt), dwuk(wuk), dwuv(wuv);
  DeviceBuffer dout(size_t(T) * h * 128 * 2, kAlloc), dlse(size_t(h) * T * 4, kAlloc);
  dout.poison();
  dlse.poison();
  cuda::ChunkedPrefillArgs a;
  a.q = q.view(Device::cuda());
  a.q.data = dq.get();
  a.cache.data = cache.view(Device::cuda());
  a.cache.data.data = dcache.get();
  a.cache.format = c.format;
  a.block_table = bt.view(Device::cuda());
  a.block_table.data = dbt.get();
  a.seqlen = L;
  a.w_uk = wuk.view(Device::cuda());
  a.w_uk.data = dwuk.get();
  a.w_uv = wuv.view(Device::cuda());
  a.w_uv.data = dwuv.get();
  a.softmax_scale = float(deepseek_v32_softmax_scale());
  a.chunk_size = c.chunk;
  a.out = TensorView::make(dout.get(), DType::bf16, {T, h, 128}, Device::cuda());
  a.lse = TensorView::make(dlse.get(), DType::f32, {h, T}, Device::cuda());
  size_t ws_bytes = 0;
  ASSERT_MLA_OK(cuda::chunked_prefill_workspace_size(a, &ws_bytes));
  DeviceBuffer ws(ws_bytes, kAlloc);
  // Reference: decompress in fp64 from the cache's values, attend to all L at once.
  std::vector<double> k(size_t(L) * h * 192), v(size_t(L) * h * 128);
  for (int s = 0; s < L; ++s)
    for (int hd = 0; hd < h; ++hd) {
      for (int j = 0; j < 128; ++j) {
        double kn = 0, vv = 0;
        for (int cc = 0; cc < 512; ++cc) {
          const double x = ckv_back.get(int64_t(s) * 512 + cc);
          kn += x * wuk.get((int64_t(hd) * 128 + j) * 512 + cc);
          vv += x * wuv.get((int64_t(hd) * 128 + j) * 512 + cc);
        }
        k[(size_t(s) * h + hd) * 192 + j] = kn;
        v[(size_t(s) * h + hd) * 128 + j] = vv;
      }
      for (int r = 0; r < 64; ++r)
        k[(size_t(s) * h + hd) * 192 + 128 + r] = rope_back.get(int64_t(s) * 64 + r);
    }
  std::vector<double> ref_out, ref_lse;
  reference_mha(as_doubles(q), k, v, {0, T}, {0, L}, h, double(a.softmax_scale), true, ref_out,
                ref_lse);
  // Every attention kernel, then the chosen one, on freshly poisoned outputs
  // and workspace.
  using cuda::prefill::Kernel;
  for (const std::optional<Kernel>& kernel : kernels_then_chosen()) {
    const std::string what = run_name("chunked prefill", kernel);
    dout.poison();
    dlse.poison();
    ws.poison();
    ASSERT_MLA_OK(cuda::chunked_prefill(a, {ws.get(), ws_bytes}, {}, kernel));
    MLA_CUDA_CHECK(cudaDeviceSynchronize());
    HostTensor out(DType::bf16, {T, h, 128}), lse(DType::f32, {h, T});
    dout.to_host(out);
    dlse.to_host(lse);
    // k_nope and v are rounded to bf16 after the GEMM (the reference keeps fp64).
    // A score then moves by up to scale * 2^-9 * sum_c |q_c k_c| (~1e-2 here,
    // typically far less), and lse by at most the largest score change: 1e-2.
    // (Measured: 2.8e-3 worst on 300 x 16 rows; 2e-3 was too tight for this.)
    expect_close(out, ref_out, lse, ref_lse, what.c_str(), 1e-2);
  }
}

TEST(PrefillGpu, ChunkedEqualsAllAtOnceBf16Cache) {
  run_chunked_case({16, 16, 300, 1000, 384, KvFormat::bf16}, 700);  // chunk does not divide L
  run_chunked_case({16, 1, 50, 50, 7, KvFormat::bf16}, 701);        // no prefix, page 1
  run_chunked_case({32, 128, 129, 700, 700, KvFormat::bf16}, 702);  // one chunk
}

TEST(PrefillGpu, ChunkedEqualsAllAtOnceFp8Cache) {
  run_chunked_case({16, 64, 200, 900, 256, KvFormat::fp8_ds_mla}, 800);
}

TEST(PrefillGpu, ChunkedRejectsBadArguments) {
  cuda::ChunkedPrefillArgs a;  // nothing given
  size_t bytes = 0;
  Status s = cuda::chunked_prefill_workspace_size(a, &bytes);
  EXPECT_FALSE(s.ok());
  // seqlen shorter than the new tokens
  HostTensor q(DType::bf16, {10, 16, 192}), cache(DType::bf16, {4, 16, 1, 576}),
      bt(DType::i32, {4}), w(DType::bf16, {16, 128, 512}), out(DType::bf16, {10, 16, 128});
  a.q = q.view(Device::cuda());
  a.cache.data = cache.view(Device::cuda());
  a.block_table = bt.view(Device::cuda());
  a.w_uk = a.w_uv = w.view(Device::cuda());
  a.out = out.view(Device::cuda());
  a.seqlen = 5;
  s = cuda::chunked_prefill_workspace_size(a, &bytes);
  EXPECT_EQ(s.code(), Errc::out_of_range) << s.to_string();
  EXPECT_NE(s.message().find("seqlen = 5"), std::string::npos) << s.message();
  a.seqlen = 65;  // needs 5 pages of 16, block_table has 4
  s = cuda::chunked_prefill_workspace_size(a, &bytes);
  EXPECT_EQ(s.code(), Errc::out_of_range) << s.to_string();
  a.seqlen = 64;
  a.chunk_size = 0;
  s = cuda::chunked_prefill_workspace_size(a, &bytes);
  EXPECT_EQ(s.code(), Errc::invalid_value) << s.to_string();
  a.chunk_size = 64;
  a.q = q.view(Device::cpu());
  s = cuda::chunked_prefill_workspace_size(a, &bytes);
  EXPECT_EQ(s.code(), Errc::invalid_device) << s.to_string();
}

}  // namespace
}  // namespace mla

// ---- the public entry points (include/mla/prefill.hpp) with CUDA tensors ----
namespace mla {
namespace {

TensorView on_device(const HostTensor& host, const DeviceBuffer& dev) {
  TensorView t = host.view(Device::cuda());
  t.data = dev.get();
  return t;
}

TEST(PrefillGpu, PublicMhaPrefillMatchesLibraryReference) {
  // The library's CPU reference (reference::mha_prefill behind mla::mha_prefill)
  // is the oracle here; it is also the check on this file's threaded oracle.
  Rng rng(900);
  const int h = 16;
  const std::vector<int> cu_q{0, 1, 70, 200}, cu_k{0, 1, 100, 230};
  const int T = cu_q.back(), Tk = cu_k.back();
  HostTensor q = random_tensor(rng, DType::bf16, {T, h, 192});
  HostTensor k = random_tensor(rng, DType::bf16, {Tk, h, 192});
  HostTensor v = random_tensor(rng, DType::bf16, {Tk, h, 128});
  HostTensor cq(DType::i32, {4}), ck(DType::i32, {4});
  for (int i = 0; i < 4; ++i) cq.set(i, cu_q[i]), ck.set(i, cu_k[i]);
  const float scale = float(deepseek_v32_softmax_scale());
  HostTensor ref_out(DType::f64, {T, h, 128}), ref_lse(DType::f64, {h, T});
  ASSERT_MLA_OK(mha_prefill({q.view(), k.view(), v.view(), cq.view(), ck.view(), scale, true,
                             ref_out.view(), ref_lse.view()}));
  std::vector<double> mine_out, mine_lse;
  reference_mha(as_doubles(q), as_doubles(k), as_doubles(v), cu_q, cu_k, h, scale, true, mine_out,
                mine_lse);
  for (int64_t i = 0; i < ref_out.numel(); ++i) ASSERT_NEAR(mine_out[i], ref_out.get(i), 1e-12);

  for (DType out_dtype : {DType::bf16, DType::f32}) {
    DeviceBuffer dq(q), dk(k), dv(v), dcq(cq), dck(ck);
    HostTensor out(out_dtype, {T, h, 128}), lse(DType::f32, {h, T});
    DeviceBuffer dout(size_t(out.numel()) * dtype_size(out_dtype), kAlloc),
        dlse(size_t(lse.numel()) * 4, kAlloc);
    dout.poison();
    dlse.poison();
    ASSERT_MLA_OK(
        mha_prefill({on_device(q, dq), on_device(k, dk), on_device(v, dv), on_device(cq, dcq),
                     on_device(ck, dck), scale, true, on_device(out, dout), on_device(lse, dlse)}));
    MLA_CUDA_CHECK(cudaDeviceSynchronize());
    dout.to_host(out);
    dlse.to_host(lse);
    expect_close(out, as_doubles(ref_out), lse, as_doubles(ref_lse), "public mha_prefill");
  }
}

TEST(PrefillGpu, PublicMhaPrefillRejectsBadSeqlens) {
  const int h = 16, T = 10;
  HostTensor q(DType::bf16, {T, h, 192}), k(DType::bf16, {T, h, 192}), v(DType::bf16, {T, h, 128});
  HostTensor out(DType::bf16, {T, h, 128}), lse(DType::f32, {h, T});
  HostTensor cq(DType::i32, {3}), ck(DType::i32, {3});
  cq.set(0, 0), cq.set(1, 6), cq.set(2, 5);  // decreasing
  ck.set(0, 0), ck.set(1, 5), ck.set(2, 10);
  DeviceBuffer dq(q), dk(k), dv(v), dout(out), dlse(lse), dcq(cq), dck(ck);
  MhaPrefillArgs a{on_device(q, dq),
                   on_device(k, dk),
                   on_device(v, dv),
                   on_device(cq, dcq),
                   on_device(ck, dck),
                   0.1f,
                   true,
                   on_device(out, dout),
                   on_device(lse, dlse)};
  Status s = mha_prefill(a);
  EXPECT_EQ(s.code(), Errc::out_of_range) << s.to_string();
  EXPECT_NE(s.message().find("cu_seqlens_q[2] = 5 is less than cu_seqlens_q[1] = 6"),
            std::string::npos)
      << s.message();
  a.q.shape[2] = a.k.shape[2] = 64;  // a d_qk the kernel is not built for
  s = mha_prefill(a);
  EXPECT_EQ(s.code(), Errc::unsupported) << s.to_string();
}

TEST(PrefillGpu, PublicDecompressKvMatchesLibraryReference) {
  Rng rng(910);
  const int N = 100, h = 16;
  HostTensor ckv = random_tensor(rng, DType::bf16, {N, 512});
  HostTensor wuk = random_tensor(rng, DType::bf16, {h, 128, 512}, -0.05, 0.05);
  HostTensor wuv = random_tensor(rng, DType::bf16, {h, 128, 512}, -0.05, 0.05);
  HostTensor rk(DType::f64, {N, h, 128}), rv(DType::f64, {N, h, 128});
  ASSERT_MLA_OK(decompress_kv({ckv.view(), wuk.view(), wuv.view(), rk.view(), rv.view()}));
  DeviceBuffer dckv(ckv), dwuk(wuk), dwuv(wuv);
  HostTensor k(DType::bf16, {N, h, 128}), v(DType::bf16, {N, h, 128});
  DeviceBuffer dk(k), dv(v);
  dk.poison();
  dv.poison();
  ASSERT_MLA_OK(decompress_kv({on_device(ckv, dckv), on_device(wuk, dwuk), on_device(wuv, dwuv),
                               on_device(k, dk), on_device(v, dv)}));
  MLA_CUDA_CHECK(cudaDeviceSynchronize());
  dk.to_host(k);
  dv.to_host(v);
  // bf16 output rounding (2^-9 relative) + f32 accumulation of 512 terms of
  // magnitude <= 0.05: 2^-8 relative + 1e-5 absolute covers both.
  for (int64_t i = 0; i < k.numel(); ++i) {
    ASSERT_NEAR(k.get(i), rk.get(i), std::ldexp(std::fabs(rk.get(i)), -8) + 1e-5) << i;
    ASSERT_NEAR(v.get(i), rv.get(i), std::ldexp(std::fabs(rv.get(i)), -8) + 1e-5) << i;
  }
}

}  // namespace
}  // namespace mla
