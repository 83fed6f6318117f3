// mla_bench_prefill: the prefill suite of docs/benchmarks.md on one GPU.
//   attention alone: b1, L 8K/16K/32K, h 128, d_qk 192 (k_rope shared by the heads), d_v 128,
//   causal decompression + attention: the same, from the latent c_kv [L, 512] + k_rope [L, 64]
//   chunked: 4K new tokens over a 0/16K/64K prefix in a paged bf16 cache (page 64)
// FLOPs: attention 2*h*(192+128) per visible (query, key) pair (causal: only the
// visible pairs, ~half), decompression 2 * 2*L*512*(h*128). Timing: CUDA events,
// warm-up, median of N runs; the bf16 GEMM ceiling is measured in the same run.
//   --crossover: only the absorbed (mla_decode, s_q = n) vs non-absorbed (chunked
//   prefill) sweep over n new tokens at a 4K / 32K prefix
//   --attention-only: only attention alone at 8K/16K/32K, every prefill::Kernel
//   in the same run, each checked against cp_async_wgmma's result
// Usage: mla bench prefill --help (or mla_bench_prefill --help: the same options).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench_check.hpp"
#include "bench_suites.hpp"
#include "bench_timing.hpp"
#include "cuda/prefill/chunked_prefill.hpp"
#include "cuda/prefill/decompress_gemm.hpp"
#include "cuda/prefill/flash_fwd.hpp"
#include "mla/decode.hpp"
#include "mla/dims.hpp"

namespace {

constexpr double kPaperCeiling = 792e12;  // bf16 GEMM 8192^3 on the H200 (docs/benchmarks.md)

// Random bf16 in [-1, 1) filled on the device from a host pattern (fast, never zeros).
void* dev_random_bf16(size_t n, uint64_t seed) {
  std::vector<uint16_t> host(std::min<size_t>(n, size_t(1) << 22));
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (auto& x : host) {
    float f = u(g);
    uint32_t b;
    std::memcpy(&b, &f, 4);
    x = uint16_t((b + 0x7fff + ((b >> 16) & 1)) >> 16);
  }
  void* d = nullptr;
  BENCH_CUDA(cudaMalloc(&d, n * 2));
  for (size_t off = 0; off < n; off += host.size()) {
    const size_t m = std::min(host.size(), n - off);
    BENCH_CUDA(
        cudaMemcpy(static_cast<uint16_t*>(d) + off, host.data(), m * 2, cudaMemcpyHostToDevice));
  }
  return d;
}

double median_ms(const std::function<void()>& fn, int reps, int warmup = 2) {
  return time_events(reps, warmup, fn).median_us * 1e-3;
}

// Visible (query, key) pairs: Tq queries that are the last Tq of Tk keys, causal.
double causal_pairs(double tq, double tk) {
  return tq * (tk - tq) + tq * (tq + 1) / 2;
}

struct Row {
  std::string suite, shape;
  double ms, tflops, frac_paper, frac_measured;
};

// A request with T new tokens over a P-token prefix in a paged bf16 cache (page
// 64, scattered pages): the non-absorbed chunked prefill (chunk 16K), median ms.
double time_chunked_prefill(int P, int T, int h, float scale, int reps) {
  const int L = P + T, page = 64, n_pages = (L + page - 1) / page;
  void* cache = dev_random_bf16(size_t(n_pages) * page * 576, 20 + P);
  std::vector<int32_t> bt(n_pages);
  for (int i = 0; i < n_pages; ++i) bt[i] = (i * 7919) % n_pages;  // scattered pages
  // (7919 is prime and > n_pages only sometimes: fall back to identity on collisions)
  {
    std::vector<char> seen(n_pages, 0);
    bool ok = true;
    for (int x : bt) ok &= !seen[x]++;
    if (!ok)
      for (int i = 0; i < n_pages; ++i) bt[i] = n_pages - 1 - i;
  }
  int32_t* dbt;
  BENCH_CUDA(cudaMalloc(&dbt, n_pages * 4));
  BENCH_CUDA(cudaMemcpy(dbt, bt.data(), n_pages * 4, cudaMemcpyHostToDevice));
  void* q = dev_random_bf16(size_t(T) * h * 192, 21);
  void* wuk = dev_random_bf16(size_t(h) * 128 * 512, 22);
  void* wuv = dev_random_bf16(size_t(h) * 128 * 512, 23);
  void* out;
  float* lse;
  BENCH_CUDA(cudaMalloc(&out, size_t(T) * h * 128 * 2));
  BENCH_CUDA(cudaMalloc(&lse, size_t(h) * T * 4));
  mla::cuda::ChunkedPrefillArgs a;
  a.q = mla::TensorView::make(q, mla::DType::bf16, {T, h, 192}, mla::Device::cuda());
  a.cache.data =
      mla::TensorView::make(cache, mla::DType::bf16, {n_pages, page, 1, 576}, mla::Device::cuda());
  a.cache.format = mla::KvFormat::bf16;
  a.block_table = mla::TensorView::make(dbt, mla::DType::i32, {n_pages}, mla::Device::cuda());
  a.seqlen = L;
  a.w_uk = mla::TensorView::make(wuk, mla::DType::bf16, {h, 128, 512}, mla::Device::cuda());
  a.w_uv = mla::TensorView::make(wuv, mla::DType::bf16, {h, 128, 512}, mla::Device::cuda());
  a.softmax_scale = scale;
  a.chunk_size = 16384;
  a.out = mla::TensorView::make(out, mla::DType::bf16, {T, h, 128}, mla::Device::cuda());
  a.lse = mla::TensorView::make(lse, mla::DType::f32, {h, T}, mla::Device::cuda());
  size_t ws_bytes = 0;
  BENCH_OK(mla::cuda::chunked_prefill_workspace_size(a, &ws_bytes));
  void* ws;
  BENCH_CUDA(cudaMalloc(&ws, ws_bytes));
  const double ms = median_ms(
      [&] {
        BENCH_OK(mla::cuda::chunked_prefill(a, {ws, ws_bytes}, {}));
      },
      reps);
  for (void* ptr : {cache, q, wuk, wuv, out, ws}) BENCH_CUDA(cudaFree(ptr));
  BENCH_CUDA(cudaFree(dbt));
  BENCH_CUDA(cudaFree(lse));
  return ms;
}

// The same request through the absorbed form: mla_decode, s_q = T, identity pages.
double time_absorbed(int P, int T, int h, float scale, int reps) {
  const int L = P + T, page = 64, n_pages = (L + page - 1) / page;
  const mla::Device dev = mla::Device::cuda();
  void* cache = dev_random_bf16(size_t(n_pages) * page * 576, 30 + P);
  std::vector<int32_t> bt(n_pages);
  for (int i = 0; i < n_pages; ++i) bt[i] = i;
  int32_t *dbt, *dlen;
  BENCH_CUDA(cudaMalloc(&dbt, n_pages * 4));
  BENCH_CUDA(cudaMemcpy(dbt, bt.data(), n_pages * 4, cudaMemcpyHostToDevice));
  BENCH_CUDA(cudaMalloc(&dlen, 4));
  BENCH_CUDA(cudaMemcpy(dlen, &L, 4, cudaMemcpyHostToDevice));
  void* q = dev_random_bf16(size_t(T) * h * 576, 31);
  void *out, *lse;
  BENCH_CUDA(cudaMalloc(&out, size_t(T) * h * 512 * 2));
  BENCH_CUDA(cudaMalloc(&lse, size_t(T) * h * 4));
  mla::DecodeArgs a;
  a.q = mla::TensorView::make(q, mla::DType::bf16, {1, T, h, 576}, dev);
  a.kv.data = mla::TensorView::make(cache, mla::DType::bf16, {n_pages, page, 1, 576}, dev);
  a.block_table = mla::TensorView::make(dbt, mla::DType::i32, {1, n_pages}, dev);
  a.cache_seqlens = mla::TensorView::make(dlen, mla::DType::i32, {1}, dev);
  a.softmax_scale = scale;
  a.out = mla::TensorView::make(out, mla::DType::bf16, {1, T, h, 512}, dev);
  a.lse = mla::TensorView::make(lse, mla::DType::f32, {1, h, T}, dev);
  size_t ws_bytes = 0;
  BENCH_OK(mla::decode_workspace_size(a, {}, &ws_bytes));
  void* ws;
  BENCH_CUDA(cudaMalloc(&ws, std::max<size_t>(ws_bytes, 256)));
  const double ms = median_ms(
      [&] {
        BENCH_OK(mla::mla_decode(a, {}, mla::Workspace{ws, ws_bytes}, {}));
      },
      reps);
  for (void* ptr : {cache, q, out, lse, ws}) BENCH_CUDA(cudaFree(ptr));
  BENCH_CUDA(cudaFree(dbt));
  BENCH_CUDA(cudaFree(dlen));
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  // Parsed with the options `mla bench prefill` shares (tools/bench_suites.hpp).
  const mla::cli::PrefillBenchOptions opt =
      mla::cli::parse_bench<mla::cli::PrefillBenchOptions>(argc, argv);
  const std::string json_path = opt.json;
  const bool quick = opt.quick;
  const bool crossover = opt.crossover;            // only the absorbed vs non-absorbed sweep
  const bool attention_only = opt.attention_only;  // every kernel, attention alone
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize >> 20);
  const int h = 128;
  const float scale = float(mla::deepseek_v32_softmax_scale());
  std::vector<Row> rows;

  // ---- the ceiling, measured in this run: bf16 GEMM 8192^3 through cuBLAS ----
  double ceiling = 0;
  {
    const int n = 8192;
    void* A = dev_random_bf16(size_t(n) * n, 1);
    void* B = dev_random_bf16(size_t(n) * n, 2);
    void* C = nullptr;
    BENCH_CUDA(cudaMalloc(&C, size_t(n) * n * 2));
    cublasHandle_t hd;
    cublasCreate(&hd);
    const float al = 1, be = 0;
    const double ms = median_ms(
        [&] {
          cublasGemmEx(hd, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &al, A, CUDA_R_16BF, n, B,
                       CUDA_R_16BF, n, &be, C, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT);
        },
        10, 3);
    ceiling = 2.0 * n * n * double(n) / (ms * 1e-3);
    std::printf("ceiling: cuBLAS bf16 GEMM 8192^3 %.3f ms = %.1f TFLOP/s\n", ms, ceiling / 1e12);
    cublasDestroy(hd);
    BENCH_CUDA(cudaFree(A));
    BENCH_CUDA(cudaFree(B));
    BENCH_CUDA(cudaFree(C));
  }
  auto add = [&](const char* suite, std::string shape, double ms, double flops) {
    const double tf = flops / (ms * 1e-3);
    rows.push_back({suite, shape, ms, tf / 1e12, tf / kPaperCeiling, tf / ceiling});
    std::printf("%-25s %-28s %9.3f ms %7.1f TFLOP/s  %5.1f%% of 792  %5.1f%% of measured\n", suite,
                shape.c_str(), ms, tf / 1e12, 100 * tf / kPaperCeiling, 100 * tf / ceiling);
    std::fflush(stdout);
  };

  // ---- attention alone, and decompression + attention ----
  std::vector<int> lens = crossover ? std::vector<int>{}
                          : quick   ? std::vector<int>{8192}
                                    : std::vector<int>{8192, 16384, 32768};
  for (int L : lens) {
    const size_t nq = size_t(L) * h * 192, nkv = size_t(L) * h * 128;
    void* q = dev_random_bf16(nq, 10 + L);
    void* latent = dev_random_bf16(size_t(L) * 576, 11 + L);  // [L, 576]: c_kv ; k_rope
    void* wuk = dev_random_bf16(size_t(h) * 128 * 512, 12);
    void* wuv = dev_random_bf16(size_t(h) * 128 * 512, 13);
    // Weights scaled so that k_nope/v stay O(1): random in [-1,1) * 1/sqrt(512) is
    // not needed for timing (values are bounded and finite either way).
    void *kn, *v, *out;
    BENCH_CUDA(cudaMalloc(&kn, nkv * 2));
    BENCH_CUDA(cudaMalloc(&v, nkv * 2));
    BENCH_CUDA(cudaMalloc(&out, nkv * 2));
    float* lse;
    BENCH_CUDA(cudaMalloc(&lse, size_t(h) * L * 4));
    auto decompress = [&] {
      for (auto [w, dst] : {std::pair{wuk, kn}, std::pair{wuv, v}}) {
        mla::cuda::prefill::DecompressGemm g{latent,           576, w,       dst,
                                             int64_t(h) * 128, L,   h * 128, 512};
        BENCH_OK(mla::cuda::prefill::decompress_gemm(g, nullptr));
      }
    };
    decompress();  // real k_nope / v values for the attention timing
    mla::cuda::prefill::FlashFwdParams p;
    p.q = q;
    p.q_row_stride = int64_t(h) * 192;
    p.q_head_stride = 192;
    p.k_nope = kn;
    p.k_nope_row_stride = int64_t(h) * 128;
    p.k_nope_head_stride = 128;
    p.k_rope = static_cast<char*>(latent) + 1024;
    p.k_rope_row_stride = 576;
    p.k_rope_head_stride = 0;
    p.v = v;
    p.v_row_stride = int64_t(h) * 128;
    p.v_head_stride = 128;
    p.out = out;
    p.out_row_stride = int64_t(h) * 128;
    p.out_head_stride = 128;
    p.lse = lse;
    p.lse_head_stride = L;
    p.batch = 1;
    p.heads = h;
    p.max_seqlen_q = L;
    p.seqlen_k = L;
    p.softmax_scale = scale;
    p.causal = true;
    const double attn_flops = 2.0 * h * (192 + 128) * causal_pairs(L, L);
    const double dec_flops = 2.0 * 2.0 * L * 512.0 * h * 128;
    const int reps = L >= 32768 ? 7 : (L >= 16384 ? 11 : 21);
    const std::string shape = "b1 h128 L" + std::to_string(L / 1024) + "K causal";
    using mla::cuda::prefill::Kernel;
    auto launch = [&](std::optional<Kernel> k) {
      BENCH_OK(mla::cuda::prefill::launch_flash_fwd(p, nullptr, k));
    };
    if (attention_only) {
      // cp_async_wgmma's result (all of lse, the first and last 256 query rows
      // of out) is the yardstick the TMA kernel must meet at these sizes, which
      // the unit tests do not reach (many key tiles, L2 head groups).
      const size_t n_lse = size_t(h) * L, n_rows = size_t(std::min(L, 256)) * h * 128;
      const size_t tail = (size_t(L) * h * 128 - n_rows) * 2;
      auto snapshot = [&](Kernel k, std::vector<float>& l, std::vector<uint16_t>& o) {
        launch(k);
        l.resize(n_lse);
        o.resize(2 * n_rows);
        BENCH_CUDA(cudaMemcpy(l.data(), lse, n_lse * 4, cudaMemcpyDeviceToHost));
        BENCH_CUDA(cudaMemcpy(o.data(), out, n_rows * 2, cudaMemcpyDeviceToHost));
        BENCH_CUDA(cudaMemcpy(o.data() + n_rows, static_cast<char*>(out) + tail, n_rows * 2,
                              cudaMemcpyDeviceToHost));
      };
      std::vector<float> ref_lse, got_lse;
      std::vector<uint16_t> ref_out, got_out;
      snapshot(Kernel::cp_async_wgmma, ref_lse, ref_out);
      auto bf = [](uint16_t b) {
        const uint32_t u = uint32_t(b) << 16;
        float f;
        std::memcpy(&f, &u, 4);
        return f;
      };
      for (Kernel k : mla::cuda::prefill::kAllKernels) {
        const std::string suite = std::string("prefill-attention-") + kernel_name(k);
        if (k != Kernel::cp_async_wgmma) {
          snapshot(k, got_lse, got_out);
          double worst_lse = 0, num = 0, den = 0;
          size_t bad = 0;
          for (size_t i = 0; i < n_lse; ++i) {
            if (!std::isfinite(got_lse[i])) ++bad;
            worst_lse = std::max(worst_lse, double(std::fabs(got_lse[i] - ref_lse[i])));
          }
          for (size_t i = 0; i < ref_out.size(); ++i) {
            const double g = bf(got_out[i]), r = bf(ref_out[i]);
            if (!std::isfinite(g)) ++bad;
            num += (g - r) * (g - r);
            den += r * r;
          }
          const double rel = std::sqrt(num / std::max(den, 1e-30));
          const bool ok = bad == 0 && worst_lse < 2e-3 && rel < 1e-2;
          std::printf(
              "check %-36s %-22s vs cp_async_wgmma: lse max|d| %.2e, out rel L2 %.2e, "
              "non-finite %zu -> %s\n",
              suite.c_str(), shape.c_str(), worst_lse, rel, bad, ok ? "ok" : "MISMATCH");
        }
        add(suite.c_str(), shape, median_ms([&] { launch(k); }, reps), attn_flops);
      }
      for (void* ptr : {q, latent, wuk, wuv, kn, v, out}) BENCH_CUDA(cudaFree(ptr));
      BENCH_CUDA(cudaFree(lse));
      continue;
    }
    // The library's choice (prefill::choose_kernel).
    add("prefill-attention", shape, median_ms([&] { launch(std::nullopt); }, reps), attn_flops);
    add("prefill-decompress", "L" + std::to_string(L / 1024) + "K h128 (2 GEMMs)",
        median_ms(decompress, 11), dec_flops);
    add("prefill-step", shape + " decomp+attn",
        median_ms(
            [&] {
              decompress();
              launch(std::nullopt);
            },
            reps),
        attn_flops + dec_flops);
    for (void* ptr : {q, latent, wuk, wuv, kn, v, out}) BENCH_CUDA(cudaFree(ptr));
    BENCH_CUDA(cudaFree(lse));
  }

  // ---- chunked: 4K new tokens over a prefix, paged bf16 cache (page 64), chunk 16K ----
  std::vector<int> prefixes =
      quick || crossover || attention_only ? std::vector<int>{} : std::vector<int>{0, 16384, 65536};
  for (int P : prefixes) {
    const int T = 4096, L = P + T;
    const double flops =
        2.0 * h * (192 + 128) * causal_pairs(T, L) + 2.0 * 2.0 * L * 512.0 * h * 128;
    add("prefill-chunked", "4K new + " + std::to_string(P / 1024) + "K prefix (chunk 16K)",
        time_chunked_prefill(P, T, h, scale, 11), flops);
  }

  // ---- absorbed vs non-absorbed: n new tokens of one request over a P-token prefix ----
  // Non-absorbed: chunked_prefill (decompress the whole cache, causal MHA). Absorbed:
  // mla_decode with s_q = n over the same paged cache (the W_UK / W_UV products of the
  // n tokens, ~0.07 GFLOP each, are left out of both). The crossover is the n where
  // the two times cross; the planner prices it (docs/planner.md, "attention form").
  if (crossover)
    for (int P : {4096, 32768})
      for (int n : {8, 16, 32, 64, 128, 256}) {
        const double non_abs = time_chunked_prefill(P, n, h, scale, 7);
        const double abs = time_absorbed(P, n, h, scale, 7);
        const std::string shape = std::to_string(n) + " new + " + std::to_string(P / 1024) + "K";
        const double L = P + n;
        add("crossover-nonabsorbed", shape, non_abs,
            2.0 * h * (192 + 128) * causal_pairs(n, L) + 2.0 * 2.0 * L * 512.0 * h * 128);
        add("crossover-absorbed", shape, abs, 2.0 * h * (576 + 512) * causal_pairs(n, L));
        std::printf("%-25s %-28s absorbed/non-absorbed time %.2f -> %s\n", "crossover",
                    shape.c_str(), abs / non_abs, abs < non_abs ? "absorbed" : "non-absorbed");
      }

  if (!json_path.empty()) {
    FILE* f = std::fopen(json_path.c_str(), "w");
    if (!f) {
      std::perror(json_path.c_str());
      return 1;
    }
    std::fprintf(f, "{\"device\": \"%s\", \"ceiling_tflops_measured\": %.1f, \"results\": [\n",
                 prop.name, ceiling / 1e12);
    for (size_t i = 0; i < rows.size(); ++i)
      std::fprintf(f,
                   "  {\"suite\": \"%s\", \"shape\": \"%s\", \"ms\": %.4f, \"tflops\": %.2f, "
                   "\"frac_of_792\": %.4f, \"frac_of_measured\": %.4f}%s\n",
                   rows[i].suite.c_str(), rows[i].shape.c_str(), rows[i].ms, rows[i].tflops,
                   rows[i].frac_paper, rows[i].frac_measured, i + 1 < rows.size() ? "," : "");
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  return 0;
}
