// mla_bench_dsa: the DSA suites of docs/benchmarks.md on the GPU (indexer, topk,
// sparse-decode, sparse-prefill, dsa-vs-dense). CUDA events around each call,
// warm-up, median of repeats, L2 flushed before every timed run, random data
// (never zeros). Prints time, TFLOP/s (FlashMLA's 2*h_q*topk*(576+512) per
// query for sparse attention), GB/s, and the fraction of the measured H200
// ceilings (4391 GB/s read, 792 TFLOP/s bf16, 1447 fp8 unless --peak-* are given:
// `mla bench sparse|indexer|topk` measures them first). Options: --help.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "bench_check.hpp"
#include "bench_suites.hpp"
#include "bench_timing.hpp"
#include "cuda/indexer/indexer_params.hpp"
#include "cuda/indexer/indexer_select.hpp"
#include "cuda/sparse/sparse_cuda.hpp"
#include "cuda/topk/topk_kernel.cuh"  // topk-probe: the kernel with a clock probe
#include "cuda/topk/topk_params.hpp"
#include "mla/decode.hpp"
#include "mla/dsa.hpp"
#include "mla/indexer.hpp"
#include "mla/sparse.hpp"

namespace idx = mla::cuda::indexer;

namespace {

// Set from --peak-gbps / --peak-tflops / --peak-fp8-tflops when given.
double kReadGBs = 4391, kBf16TF = 792, kFp8TF = 1447;
constexpr int kIdxPageKeys = mla::IndexerCacheLayout::kPageTokens;  // 64
constexpr int kIdxPageBytes = mla::IndexerCacheLayout::kPageBytes;  // 8448

__device__ uint32_t hash32(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return uint32_t(x);
}
enum Fill { kBytesE4m3 = 0, kBf16 = 1, kF32 = 2 };
__global__ void fill_kernel(void* p, int64_t n, int kind, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const uint32_t h = hash32(seed * 0x9E3779B97F4A7C15ULL + i);
    if (kind == kBytesE4m3) {
      uint8_t c = uint8_t(h) & 0xf7;  // no NaN (0x7f/0xff), varied magnitudes
      static_cast<uint8_t*>(p)[i] = c;
    } else if (kind == kBf16) {
      const float f = (h >> 8) * (2.f / 16777216.f) - 1.f;
      static_cast<uint16_t*>(p)[i] = uint16_t(__float_as_uint(f) >> 16);
    } else {
      static_cast<float*>(p)[i] = (h >> 8) * (2.f / 16777216.f) - 1.f;
    }
  }
}
// Fix up fp8_ds_mla entries / indexer pages: scales must be powers of two.
__global__ void fix_fp8_entries(uint8_t* p, int64_t n_entries) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n_entries;
       i += int64_t(gridDim.x) * blockDim.x)
    for (int g = 0; g < 4; ++g) reinterpret_cast<float*>(p + i * 656 + 512)[g] = 0.0625f;
}
__global__ void fix_indexer_pages(uint8_t* p, int64_t pages) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < pages * 64;
       i += int64_t(gridDim.x) * blockDim.x)
    reinterpret_cast<float*>(p + (i / kIdxPageKeys) * kIdxPageBytes +
                             mla::IndexerCacheLayout::kCodeBytes)[i % kIdxPageKeys] = 0.0078125f;
}
// Random distinct-ish slots of request b: b * L + uniform position (pages of
// request b are contiguous in the pool, identity block table).
__global__ void fill_indices(int32_t* idx, int64_t rows, int topk, int rows_per_req, int64_t L,
                             uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * topk;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / topk, b = r / rows_per_req;
    idx[i] = int32_t(b * L + hash32(seed + i) % L);
  }
}
__global__ void iota_kernel(int32_t* p, int64_t n, int32_t mul) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    p[i] = int32_t(i) * mul;
}
__global__ void const_kernel(int32_t* p, int64_t n, int32_t v) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    p[i] = v;
}

void* dalloc(size_t bytes) {
  void* p = nullptr;
  BENCH_CUDA(cudaMalloc(&p, std::max<size_t>(bytes, 256)));
  return p;
}
void fill(void* p, int64_t n, int kind, uint64_t seed) {
  fill_kernel<<<2048, 256>>>(p, n, kind, seed);
  BENCH_CUDA(cudaGetLastError());
}

// The SM clock now: clock64 ticks of one thread over 20 us of globaltimer.
__global__ void clock_probe_kernel(double* mhz) {
  uint64_t g0, g1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g0));
  const long long c0 = clock64();
  do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g1));
  while (g1 - g0 < 20000);
  *mhz = double(clock64() - c0) * 1e3 / double(g1 - g0);
}
double sm_clock_mhz() {
  static double* d = static_cast<double*>(dalloc(sizeof(double)));
  double h = 0;
  clock_probe_kernel<<<1, 1>>>(d);
  BENCH_CUDA(cudaMemcpy(&h, d, sizeof(double), cudaMemcpyDeviceToHost));
  return h;
}
// Every SM busy with FMAs for `ms` milliseconds: the clocks ramp up under load
// (short suites otherwise run at whatever clock the idle GPU is at).
__global__ void busy_kernel(float* sink, uint64_t ns) {
  uint64_t g0, g;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g0));
  float x = threadIdx.x;
  do {
    for (int i = 0; i < 256; ++i) x = fmaf(x, 0.999f, 0.5f);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g));
  } while (g - g0 < ns);
  if (x == 1.2345f) *sink = x;
}
void warm_gpu(int ms) {
  static float* sink = static_cast<float*>(dalloc(4));
  busy_kernel<<<132 * 8, 256>>>(sink, uint64_t(ms) * 1000000);
  BENCH_CUDA(cudaDeviceSynchronize());
}

// The top-k kernel's read pattern alone: CTA b reads row b / split's segment
// b % split, each thread Vecs float4 per chunk, Depth chunks in flight (the
// loop shape of src/cuda/topk/topk_kernel.cuh, without the selection): the
// read ceiling a one-read select with that shape can reach.
template <int Threads, int Vecs, int Depth>
__global__ void __launch_bounds__(Threads)
    read_rows_kernel(const float* logits, int64_t n, int split, float* sink) {
  const int64_t row = blockIdx.x / split, seg = blockIdx.x % split;
  const int64_t nvec = n / 4, per = (nvec + split - 1) / split;
  const float4* v = reinterpret_cast<const float4*>(logits + row * n);
  const int64_t v0 = seg * per, v1 = std::min(nvec, v0 + per);
  float acc = 0.f;
  for (int64_t c = v0 + int64_t(threadIdx.x) * Vecs; c < v1; c += int64_t(Threads) * Vecs * Depth) {
    float4 x[Depth][Vecs];
#pragma unroll
    for (int d = 0; d < Depth; ++d)
#pragma unroll
      for (int j = 0; j < Vecs; ++j) {
        const int64_t i = c + int64_t(d) * Threads * Vecs + j;
        x[d][j] = i < v1 ? v[i] : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
    for (int d = 0; d < Depth; ++d)
#pragma unroll
      for (int j = 0; j < Vecs; ++j)
        acc = fmaxf(acc, x[d][j].x + x[d][j].y + x[d][j].z + x[d][j].w);
  }
  if (acc == 1.2345f) *sink = acc;
}

// Median of `reps` calls in microseconds, L2 flushed before each (bench_timing.hpp).
struct Timer {
  double time(const std::function<void()>& fn, int reps = 15) {
    return time_events(BenchTiming{reps, 3, true}, fn).median_us;
  }
};

struct Row {
  std::string suite, shape;
  double us, tflops, gbs, frac;
  std::string frac_of;
};
std::vector<Row> g_rows;
void report(const std::string& suite, const std::string& shape, double us, double flops,
            double bytes, bool compute_bound, double tf_ceiling) {
  Row r{suite, shape, us, flops / us * 1e-6, bytes / us * 1e-3, 0, ""};
  if (compute_bound)
    r.frac = r.tflops / tf_ceiling, r.frac_of = tf_ceiling == kFp8TF ? "fp8 TF" : "bf16 TF";
  else
    r.frac = r.gbs / kReadGBs, r.frac_of = "read BW";
  std::printf("%-15s %-48s %10.1f us %8.1f TF/s %8.0f GB/s %5.1f%% of %s\n", suite.c_str(),
              shape.c_str(), us, r.tflops, r.gbs, 100 * r.frac, r.frac_of.c_str());
  std::fflush(stdout);
  g_rows.push_back(r);
}

// ---- indexer decode: b x s_q queries over L keys each (paged, 132 B/key) ----
// The inputs of one decode shape on the device (random e4m3 keys and queries,
// pages in order, every request L keys long) and the params over them.
struct IndexerDecodeInputs {
  int B, s_q;
  int64_t L, pages_per, pages;
  uint8_t *cache, *q;
  float* w;
  int32_t *bt, *lens;

  IndexerDecodeInputs(int B_, int s_q_, int64_t L_)
      : B(B_), s_q(s_q_), L(L_), pages_per((L_ + 63) / 64), pages(B_ * pages_per) {
    cache = static_cast<uint8_t*>(dalloc(pages * kIdxPageBytes));
    fill(cache, pages * kIdxPageBytes, kBytesE4m3, 1);
    fix_indexer_pages<<<1024, 256>>>(cache, pages);
    q = static_cast<uint8_t*>(dalloc(int64_t(B) * s_q * 64 * 128));
    fill(q, int64_t(B) * s_q * 64 * 128, kBytesE4m3, 2);
    w = static_cast<float*>(dalloc(int64_t(B) * s_q * 64 * 4));
    fill(w, int64_t(B) * s_q * 64, kF32, 3);
    bt = static_cast<int32_t*>(dalloc(pages * 4));
    iota_kernel<<<256, 256>>>(bt, pages, 1);
    lens = static_cast<int32_t*>(dalloc(B * 4));
    const_kernel<<<1, 256>>>(lens, B, int32_t(L));
  }
  ~IndexerDecodeInputs() {
    cudaFree(cache), cudaFree(q), cudaFree(w), cudaFree(bt), cudaFree(lens);
  }
  IndexerDecodeInputs(const IndexerDecodeInputs&) = delete;
  IndexerDecodeInputs& operator=(const IndexerDecodeInputs&) = delete;

  idx::IndexerLogitsParams params(float* logits) const {
    idx::IndexerLogitsParams p;
    p.q = q, p.w = w, p.logits = logits, p.logits_stride = L, p.width = L,
    p.num_tokens = int64_t(B) * s_q, p.paged = true;
    p.batch = B, p.s_q = s_q, p.seqlens = lens, p.block_table = bt,
    p.block_table_stride = pages_per;
    p.cache = {cache, kIdxPageBytes, kIdxPageKeys, pages};
    return p;
  }
  int64_t logits_count() const { return int64_t(B) * s_q * L; }
  double flops() const { return 2.0 * 64 * 128 * double(B) * s_q * L; }
  double bytes() const { return double(B) * L * 132 + double(B) * s_q * L * 4; }
  std::string shape() const {
    return "b" + std::to_string(B) + " s_q" + std::to_string(s_q) + " L" +
           std::to_string(L / 1024) + "K";
  }
};

double bench_indexer_decode(Timer& tm, int B, int s_q, int64_t L, bool print = true) {
  const IndexerDecodeInputs in(B, s_q, L);
  auto* logits = static_cast<float*>(dalloc(in.logits_count() * 4));
  const idx::IndexerLogitsParams p = in.params(logits);
  const double us = tm.time([&] { BENCH_OK(idx::launch_indexer_logits(p, nullptr)); });
  if (print) report("indexer-decode", in.shape(), us, in.flops(), in.bytes(), false, kFp8TF);
  cudaFree(logits);
  return us;
}

// Prefill indexer inputs: T query tokens (64 heads x 128 e4m3 + weights), the
// last T tokens of an N-token prompt, over N flat e4m3 keys with their scales;
// query t sees keys [0, N - T + t]. Owns its device buffers.
struct IndexerPrefillInputs {
  uint8_t* q;
  float* w;
  uint8_t* k;
  float* ks;
  int32_t *kst, *ken;
  float* logits;
  double visible = 0;  // query-key pairs under the causal mask
  idx::IndexerLogitsParams p;

  IndexerPrefillInputs(int T, int64_t N)
      : q(static_cast<uint8_t*>(dalloc(int64_t(T) * 8192))),
        w(static_cast<float*>(dalloc(int64_t(T) * 256))),
        k(static_cast<uint8_t*>(dalloc(N * 128))),
        ks(static_cast<float*>(dalloc(N * 4))),
        kst(static_cast<int32_t*>(dalloc(T * 4))),
        ken(static_cast<int32_t*>(dalloc(T * 4))),
        logits(static_cast<float*>(dalloc(int64_t(T) * N * 4))) {
    fill(q, int64_t(T) * 8192, kBytesE4m3, 4);
    fill(w, int64_t(T) * 64, kF32, 5);
    fill(k, N * 128, kBytesE4m3, 6);
    fill(ks, N, kF32, 7);
    const_kernel<<<64, 256>>>(kst, T, 0);
    std::vector<int32_t> h(T);
    for (int t = 0; t < T; ++t) h[t] = int32_t(N - T + t + 1), visible += h[t];
    BENCH_CUDA(cudaMemcpy(ken, h.data(), T * 4, cudaMemcpyHostToDevice));
    p.q = q, p.w = w, p.logits = logits, p.logits_stride = N, p.width = N, p.num_tokens = T;
    p.flat_keys = k, p.flat_scales = ks, p.num_keys = N, p.ks = kst, p.ke = ken;
  }
  ~IndexerPrefillInputs() {
    cudaFree(q), cudaFree(w), cudaFree(k), cudaFree(ks), cudaFree(kst), cudaFree(ken),
        cudaFree(logits);
  }
  IndexerPrefillInputs(const IndexerPrefillInputs&) = delete;
  IndexerPrefillInputs& operator=(const IndexerPrefillInputs&) = delete;
};

void bench_indexer_prefill(Timer& tm, int T, int64_t N) {
  const IndexerPrefillInputs in(T, N);
  const double us = tm.time([&] { BENCH_OK(idx::launch_indexer_logits(in.p, nullptr)); }, 5);
  report("indexer-prefill",
         std::to_string(T) + " q x " + std::to_string(N / 1024) + "K keys causal " +
             idx::kernel_name(idx::choose_kernel(in.p)),
         us, 2.0 * 64 * 128 * in.visible, double(T) * N * 4 + N * 132.0, true, kFp8TF);
}

// The unfused prefill selection a fused indexer + top-k must beat by 1.3x
// (issue 19): indexer logits for T causal queries over N flat keys ([T, N]
// fp32 written), then the top-2048 of every row (the automatic plan, by
// position, as the DSA step asks), each stage alone and the pair back to back.
void bench_prefill_select(Timer& tm, int T, int64_t N) {
  namespace tk = mla::cuda::topk;
  const IndexerPrefillInputs in(T, N);
  auto* out = static_cast<int32_t*>(dalloc(int64_t(T) * 2048 * 4));
  tk::TopkParams t;
  t.logits = in.logits, t.logits_stride = N, t.num_rows = T, t.width = N, t.k = 2048, t.out = out,
  t.out_stride = 2048, t.best_first = false;
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const tk::TopkPlan plan = tk::choose(T, N, 2048, sms);
  const auto indexer = [&] { BENCH_OK(idx::launch_indexer_logits(in.p, nullptr)); };
  const auto topk = [&] { BENCH_OK(tk::launch_topk(t, plan.kernel, plan.cluster, nullptr)); };
  const std::string shape = std::to_string(T) + " q x " + std::to_string(N / 1024) + "K causal";
  const double bytes = double(T) * N * 4, flops = 2.0 * 64 * 128 * in.visible;
  report("prefill-select",
         shape + " indexer " + idx::kernel_name(idx::choose_kernel(in.p)) + " (logits written)",
         tm.time(indexer, 5), flops, bytes, true, kFp8TF);
  report("prefill-select",
         shape + " top-k " + tk::kernel_name(plan.kernel) + " c" + std::to_string(plan.cluster),
         tm.time(topk, 5), 0, bytes, false, 0);
  report("prefill-select", shape + " unfused: indexer + top-k",
         tm.time([&] { indexer(), topk(); }, 5), flops, 2 * bytes, true, kFp8TF);
  std::vector<int32_t> unfused(size_t(T) * 2048), fused(unfused.size());
  BENCH_CUDA(cudaMemcpy(unfused.data(), out, unfused.size() * 4, cudaMemcpyDeviceToHost));
  // The fused select's indexer kernel alone (the candidate sink, default
  // capacity): against the logits kernel above, the cost of its epilogue.
  {
    idx::CandidateArgs ca;
    ca.cap = idx::kDefaultCapacityPerK * 2048, ca.k = 2048;
    ca.logits = static_cast<float*>(dalloc(size_t(T) * ca.cap * 4));
    ca.pos = static_cast<int32_t*>(dalloc(size_t(T) * ca.cap * 4));
    ca.counts = static_cast<int32_t*>(dalloc(size_t(T) * 4));
    ca.over_rows = static_cast<int32_t*>(dalloc(size_t(T) * 4));
    ca.over_n = static_cast<int32_t*>(dalloc(4));
    idx::IndexerLogitsParams cp = in.p;
    cp.logits = nullptr;
    report(
        "prefill-select",
        shape + " fused kernel alone (candidates, capacity " + std::to_string(ca.cap / 1024) + "K)",
        tm.time([&] { BENCH_OK(idx::launch_prefill_candidates(cp, ca, nullptr)); }, 5), flops, 0,
        true, kFp8TF);
    cudaFree(ca.logits), cudaFree(ca.pos), cudaFree(ca.counts), cudaFree(ca.over_rows),
        cudaFree(ca.over_n);
  }
  // The fused select (indexer_select.hpp): the indexer kernel keeps only each
  // row's candidates (no [T, N] logits), the top-k runs over their buffers;
  // rows that overflow their buffer are recomputed unfused (counted below).
  for (const auto& [cap, how] : {std::pair{int64_t(0), idx::CandidateTopk::resident},
                                 std::pair{int64_t(0), idx::CandidateTopk::choose},
                                 std::pair{int64_t(12 * 2048), idx::CandidateTopk::resident}}) {
    idx::PrefillSelectParams sp;
    sp.idx = in.p, sp.k = 2048, sp.out = out, sp.out_stride = 2048, sp.best_first = false;
    idx::SelectOptions opt;
    opt.path = idx::SelectPath::fused, opt.capacity = cap, opt.candidate_topk = how;
    const size_t ws_bytes = idx::prefill_select_workspace(sp, opt);
    void* ws = dalloc(ws_bytes);
    idx::SelectStats st;
    BENCH_CUDA(cudaMemset(out, 0xff, fused.size() * 4));
    BENCH_OK(idx::prefill_select(sp, opt, ws, ws_bytes, nullptr, &st));
    BENCH_CUDA(cudaMemcpy(fused.data(), out, fused.size() * 4, cudaMemcpyDeviceToHost));
    const int64_t c = cap > 0 ? cap : idx::kDefaultCapacityPerK * 2048;
    report("prefill-select",
           shape + " fused: indexer + top-k, capacity " + std::to_string(c / 1024) + "K" +
               (how == idx::CandidateTopk::resident ? " (resident top-k)" : " (top-k choose)"),
           tm.time([&] { BENCH_OK(idx::prefill_select(sp, opt, ws, ws_bytes, nullptr)); }, 5),
           flops, 0, true, kFp8TF);
    std::printf(
        "prefill-select  %s fused capacity %lld: workspace %.0f MB (logits %.0f MB), "
        "kept per row mean %.0f max %lld, rows overflowed %lld of %d, lists %s the unfused\n",
        shape.c_str(), (long long)c, ws_bytes / 1e6, bytes / 1e6, double(st.total_kept) / T,
        (long long)st.max_kept, (long long)st.overflow_rows, T,
        fused == unfused ? "equal to" : "DIFFERENT from");
    cudaFree(ws);
  }
  cudaFree(out);
}

// Top-k of R rows of N uniform fp32 logits (floor: the logits read once). plan:
// a given kernel and cluster size, or (null) the one topk::choose picks.
double bench_topk(Timer& tm, int64_t R, int64_t N, int k, bool print = true,
                  const mla::cuda::topk::TopkPlan* plan = nullptr, bool best_first = true) {
  namespace tk = mla::cuda::topk;
  auto* logits = static_cast<float*>(dalloc(R * N * 4));
  fill(logits, R * N, kF32, 8);
  auto* out = static_cast<int32_t*>(dalloc(R * k * 4));
  tk::TopkParams p;
  p.logits = logits, p.logits_stride = N, p.num_rows = R, p.width = N, p.k = k, p.out = out,
  p.out_stride = k, p.best_first = best_first;
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const tk::TopkPlan use = plan ? *plan : tk::choose(R, N, k, sms);
  p.l2_prefetch = use.l2_prefetch;
  const auto run = [&] { BENCH_OK(tk::launch_topk(p, use.kernel, use.cluster, nullptr)); };
  const double us = tm.time(run);
  if (print)
    report("topk",
           std::to_string(R) + " x " + std::to_string(N / 1024) + "K k" + std::to_string(k) + " " +
               tk::kernel_name(use.kernel) + " c" + std::to_string(use.cluster) +
               (use.l2_prefetch ? " prefetch" : " no-prefetch") +
               (best_first ? "" : " by-position") + (plan ? "" : " (auto)"),
           us, 0, double(R) * N * 4, false, 0);
  cudaFree(logits), cudaFree(out);
  return us;
}

// The read alone in the top-k kernel's loop shape (read_rows_kernel), rows split over `split`
// CTAs: the ceiling of a one-read select with that shape.
template <int Threads, int Vecs, int Depth>
void bench_topk_read(Timer& tm, int64_t R, int64_t N, int split) {
  auto* logits = static_cast<float*>(dalloc(R * N * 4));
  fill(logits, R * N, kF32, 8);
  static float* sink = static_cast<float*>(dalloc(4));
  const auto run = [&] {
    read_rows_kernel<Threads, Vecs, Depth>
        <<<unsigned(R * split), Threads>>>(logits, N, split, sink);
  };
  const double us = tm.time(run);
  report("topk-read",
         std::to_string(R) + " x " + std::to_string(N / 1024) + "K " + std::to_string(Threads) +
             "thr v" + std::to_string(Vecs) + " d" + std::to_string(Depth) + " split" +
             std::to_string(split),
         us, 0, double(R) * N * 4, false, 0);
  cudaFree(logits);
}

// Where a top-k CTA's time goes (the kernel's Probe hook): clock64 stamps of
// thread 0 of every CTA, averaged over the CTAs of one launch after an L2 flush.
struct TopkClockProbe {
  long long* out;  // 8 per CTA (topk_kernel.cuh's NoProbe says which)
  __device__ void mark(int i) const {
    if (threadIdx.x == 0) out[blockIdx.x * 8 + i] = clock64();
  }
  __device__ long long now() const { return clock64(); }
  __device__ void add(int i, long long v) const {
    if (threadIdx.x == 0) out[blockIdx.x * 8 + i] += v;
  }
};

template <mla::cuda::topk::Kernel K>
void bench_topk_probe(int64_t R, int64_t N, int cs, bool best_first = true, int k = 2048) {
  namespace tk = mla::cuda::topk;
  using T = typename tk::TileOf<K>::type;
  const auto kern = tk::topk_kernel<T, TopkClockProbe>;
  const int smem = int(sizeof(tk::Smem<T>));
  BENCH_CUDA(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  auto* logits = static_cast<float*>(dalloc(R * N * 4));
  fill(logits, R * N, kF32, 8);
  auto* out = static_cast<int32_t*>(dalloc(R * k * 4));
  const int64_t grid = R * cs;
  auto* buf = static_cast<long long*>(dalloc(grid * 8 * sizeof(long long)));
  tk::TopkParams p;
  p.logits = logits, p.logits_stride = N, p.num_rows = R, p.width = N, p.k = k, p.out = out,
  p.out_stride = k, p.best_first = best_first;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(grid), 1u, 1u);
  cfg.blockDim = dim3(unsigned(T::kThreads), 1u, 1u);
  cfg.dynamicSmemBytes = size_t(smem);
  cudaLaunchAttribute la[1];
  la[0].id = cudaLaunchAttributeClusterDimension;
  la[0].val.clusterDim.x = unsigned(cs), la[0].val.clusterDim.y = 1, la[0].val.clusterDim.z = 1;
  cfg.attrs = la, cfg.numAttrs = 1;
  size_t flush_bytes = 0;
  void* flush = bench_flush_buffer(&flush_bytes);
  for (int it = 0; it < 4; ++it) {
    BENCH_CUDA(cudaMemset(buf, 0, grid * 8 * sizeof(long long)));
    bench_flush_l2(flush, flush_bytes, it);
    BENCH_CUDA(cudaLaunchKernelEx(&cfg, kern, p, TopkClockProbe{buf}));
    BENCH_CUDA(cudaDeviceSynchronize());
  }
  std::vector<long long> h(grid * 8);
  BENCH_CUDA(cudaMemcpy(h.data(), buf, h.size() * sizeof(long long), cudaMemcpyDeviceToHost));
  double sum[8] = {0};
  for (int64_t b = 0; b < grid; ++b) {
    const long long* m = &h[b * 8];
    sum[0] += m[1] - m[0], sum[1] += m[2] - m[1], sum[2] += m[3] - m[2], sum[3] += m[4] - m[3];
    sum[4] += m[4] - m[0], sum[5] += m[5], sum[6] += m[6], sum[7] += m[7];
  }
  const double mhz = sm_clock_mhz(), us = 1.0 / (mhz * grid);
  std::printf(
      "topk-probe      %lld x %lldK k%d %s c%d%s: per CTA stream %.1f us (%.1f compactions, %.1f "
      "us), "
      "own select %.1f us, merge %.1f us, output %.1f us, total %.1f us; %.0f entries after the "
      "stream\n",
      (long long)R, (long long)(N / 1024), k, tk::kernel_name(K), cs,
      best_first ? "" : " by-position", sum[0] * us, sum[6] / grid, sum[5] * us, sum[1] * us,
      sum[2] * us, sum[3] * us, sum[4] * us, sum[7] / grid);
  std::fflush(stdout);
  cudaFree(logits), cudaFree(out), cudaFree(buf);
}

// sparse decode (paged) or prefill (flat kv = one page); returns microseconds
// kernel: the backend's choice (automatic) or a forced one (named in the row).
double bench_sparse(Timer& tm, const char* suite, int B, int s_q, int h, int64_t L, int topk,
                    bool fp8, bool print = true,
                    mla::cuda::sparse::Kernel kernel = mla::cuda::sparse::Kernel::automatic) {
  const int64_t entry = fp8 ? 656 : 1152;
  const int64_t slots = int64_t(B) * L;
  auto* kv = static_cast<uint8_t*>(dalloc(slots * entry));
  if (fp8) {
    fill(kv, slots * entry, kBytesE4m3, 9);
    fix_fp8_entries<<<1024, 256>>>(kv, slots);
  } else {
    fill(kv, slots * 576, kBf16, 9);
  }
  auto* q = dalloc(int64_t(B) * s_q * h * 576 * 2);
  fill(q, int64_t(B) * s_q * h * 576, kBf16, 10);
  auto* idx = static_cast<int32_t*>(dalloc(int64_t(B) * s_q * topk * 4));
  fill_indices<<<2048, 256>>>(idx, int64_t(B) * s_q, topk, s_q, L, 11);
  auto* out = dalloc(int64_t(B) * s_q * h * 512 * 2);
  auto* lse = static_cast<float*>(dalloc(int64_t(B) * s_q * h * 4));
  // The backend of mla::sparse_decode with its automatic kernel choice.
  const mla::Device dev = mla::Device::cuda(0);
  mla::SparseDecodeArgs a;
  a.q = mla::TensorView::make(q, mla::DType::bf16, {B, s_q, h, 576}, dev);
  a.kv.format = fp8 ? mla::KvFormat::fp8_ds_mla : mla::KvFormat::bf16;
  a.kv.data = mla::TensorView::make(kv, fp8 ? mla::DType::u8 : mla::DType::bf16,
                                    {slots / 64, 64, 1, fp8 ? entry : 576}, dev);
  a.indices = mla::TensorView::make(idx, mla::DType::i32, {B, s_q, topk}, dev);
  a.softmax_scale = 0.1352f;
  a.out = mla::TensorView::make(out, mla::DType::bf16, {B, s_q, h, 512}, dev);
  a.lse = mla::TensorView::make(lse, mla::DType::f32, {B, h, s_q}, dev);
  const mla::cuda::sparse::Options opts{.kernel = kernel};
  size_t wsb = 0;
  BENCH_OK(mla::cuda::sparse_decode_workspace_size(a, &wsb, opts));
  void* ws = wsb ? dalloc(wsb) : nullptr;
  const double us = tm.time([&] {
    BENCH_OK(mla::cuda::sparse_decode(a, mla::Workspace{ws, wsb}, {}, opts));
  });
  const double queries = double(B) * s_q;
  const double flops = 2.0 * h * topk * (576 + 512) * queries;
  const double bytes =
      queries * topk * entry + queries * h * (576 + 512) * 2;  // each listed entry once per query
  if (print)
    report(suite,
           // "wgmma": automatic runs the decode kernel on dense [B, s_q, topk] lists;
           // a forced kernel is named
           (kernel == mla::cuda::sparse::Kernel::automatic
                ? std::string("wgmma ")
                : std::string(mla::cuda::sparse::kernel_name(kernel)) + " ") +
               (fp8 ? "fp8 " : "bf16 ") + "b" + std::to_string(B) + " s_q" + std::to_string(s_q) +
               " h" + std::to_string(h) + " s_kv" + std::to_string(L / 1024) + "K top" +
               std::to_string(topk),
           us, flops, bytes, h >= 64, kBf16TF);
  cudaFree(kv), cudaFree(q), cudaFree(idx), cudaFree(out), cudaFree(lse), cudaFree(ws);
  return us;
}

// Sparse prefill through the backend of mla::sparse_prefill: q [s_q, h, 576]
// over a flat kv [s_kv, 576] bf16 (fp8: [s_kv, 656] fp8_ds_mla entries), s_q
// index lists of topk uniform rows, with `kernel` (automatic: the prefill kernel).
double bench_sparse_prefill(Timer& tm, int64_t s_q, int h, int64_t s_kv, int topk,
                            mla::cuda::sparse::Kernel kernel, bool fp8 = false) {
  const bool mma = kernel == mla::cuda::sparse::Kernel::mma_sync;
  const mla::Device dev = mla::Device::cuda(0);
  const int64_t entry = fp8 ? 656 : 1152;
  auto* kv = dalloc(s_kv * entry);
  if (fp8) {
    fill(kv, s_kv * entry, kBytesE4m3, 9);
    fix_fp8_entries<<<1024, 256>>>(static_cast<uint8_t*>(kv), s_kv);
  } else {
    fill(kv, s_kv * 576, kBf16, 9);
  }
  auto* q = dalloc(s_q * h * 576 * 2);
  fill(q, s_q * h * 576, kBf16, 10);
  auto* idx = static_cast<int32_t*>(dalloc(s_q * topk * 4));
  fill_indices<<<2048, 256>>>(idx, s_q, topk, int(s_q), s_kv, 11);
  auto* out = dalloc(s_q * h * 512 * 2);
  auto* lse = dalloc(s_q * h * 4);
  mla::SparsePrefillArgs a;
  a.q = mla::TensorView::make(q, mla::DType::bf16, {s_q, h, 576}, dev);
  a.kv = fp8 ? mla::TensorView::make(kv, mla::DType::u8, {s_kv, 656}, dev)
             : mla::TensorView::make(kv, mla::DType::bf16, {s_kv, 576}, dev);
  a.kv_format = fp8 ? mla::KvFormat::fp8_ds_mla : mla::KvFormat::bf16;
  a.indices = mla::TensorView::make(idx, mla::DType::i32, {s_q, topk}, dev);
  a.softmax_scale = 0.1352f;
  a.out = mla::TensorView::make(out, mla::DType::bf16, {s_q, h, 512}, dev);
  a.lse = mla::TensorView::make(lse, mla::DType::f32, {s_q, h}, dev);
  const mla::cuda::sparse::Options opts{.kernel = kernel};
  size_t wsb = 0;
  BENCH_OK(mla::cuda::sparse_prefill_workspace_size(a, &wsb, opts));
  void* ws = wsb ? dalloc(wsb) : nullptr;
  const double us = tm.time(
      [&] {
        BENCH_OK(mla::cuda::sparse_prefill(a, mla::Workspace{ws, wsb}, {}, opts));
      },
      mma ? 5 : 9);
  const double flops = 2.0 * h * topk * (576 + 512) * double(s_q);
  const double bytes = double(s_q) * topk * entry + double(s_q) * h * (576 + 512) * 2;
  report("sparse-prefill",
         std::string(mla::cuda::sparse::kernel_name(kernel)) + (fp8 ? " fp8" : "") + " s_q" +
             std::to_string(s_q) + " h" + std::to_string(h) + " s_kv" +
             std::to_string(s_kv / 1024) + "K top" + std::to_string(topk) + " ws" +
             std::to_string(wsb >> 20) + "MB",
         us, flops, bytes, true, kBf16TF);
  cudaFree(kv), cudaFree(q), cudaFree(idx), cudaFree(out), cudaFree(lse), cudaFree(ws);
  return us;
}

// The whole public DSA step (mla::dsa_decode, path forced) against dense
// mla_decode on the same cache, B requests x 1 token x h heads at context L:
// the measured crossover the dispatch threshold should come from (issue 4.7).
// Returns {sparse step us, dense us}.
std::pair<double, double> bench_dsa_step(Timer& tm, int B, int h, int64_t L, bool fp8,
                                         int topk = 2048) {
  const int64_t pages_per = (L + 63) / 64, pages = B * pages_per;
  const int64_t entry = fp8 ? 656 : 1152;
  const mla::Device dev = mla::Device::cuda(0);
  auto* kv = static_cast<uint8_t*>(dalloc(pages * 64 * entry));
  if (fp8) {
    fill(kv, pages * 64 * entry, kBytesE4m3, 21);
    fix_fp8_entries<<<1024, 256>>>(kv, pages * 64);
  } else {
    fill(kv, pages * 64 * 576, kBf16, 21);
  }
  auto* icache = static_cast<uint8_t*>(dalloc(pages * 8448));
  fill(icache, pages * 8448, kBytesE4m3, 22);
  fix_indexer_pages<<<1024, 256>>>(icache, pages);
  auto* q = dalloc(int64_t(B) * h * 576 * 2);
  fill(q, int64_t(B) * h * 576, kBf16, 23);
  auto* q8 = dalloc(int64_t(B) * 64 * 128);
  fill(q8, int64_t(B) * 64 * 128, kBytesE4m3, 24);
  auto* wf = dalloc(int64_t(B) * 64 * 4);
  fill(wf, int64_t(B) * 64, kF32, 25);
  auto* bt = static_cast<int32_t*>(dalloc(pages * 4));
  iota_kernel<<<256, 256>>>(bt, pages, 1);
  auto* lens = static_cast<int32_t*>(dalloc(B * 4));
  const_kernel<<<1, 256>>>(lens, B, int32_t(L));
  auto* out = dalloc(int64_t(B) * h * 512 * 2);
  auto* lse = dalloc(int64_t(B) * h * 4);
  mla::DsaDecodeArgs a;
  a.q = mla::TensorView::make(q, mla::DType::bf16, {B, 1, h, 576}, dev);
  a.kv.format = fp8 ? mla::KvFormat::fp8_ds_mla : mla::KvFormat::bf16;
  a.kv.data = fp8 ? mla::TensorView::make(kv, mla::DType::u8, {pages, 64, 1, 656}, dev)
                  : mla::TensorView::make(kv, mla::DType::bf16, {pages, 64, 1, 576}, dev);
  a.block_table = mla::TensorView::make(bt, mla::DType::i32, {B, pages_per}, dev);
  a.cache_seqlens = mla::TensorView::make(lens, mla::DType::i32, {B}, dev);
  a.max_seqlen = L;
  a.index_q8 = mla::TensorView::make(q8, mla::DType::e4m3, {B, 1, 64, 128}, dev);
  a.index_w_folded = mla::TensorView::make(wf, mla::DType::f32, {B, 1, 64}, dev);
  a.index_cache.data = mla::TensorView::make(icache, mla::DType::u8, {pages, 8448}, dev);
  a.softmax_scale = 0.1352f;
  a.out = mla::TensorView::make(out, mla::DType::bf16, {B, 1, h, 512}, dev);
  a.lse = mla::TensorView::make(lse, mla::DType::f32, {B, h, 1}, dev);
  double us[2] = {-1, -1};
  for (int i = 0; i < 2; ++i) {
    mla::DsaPolicy pol;
    pol.path = i == 0 ? mla::DsaPath::sparse : mla::DsaPath::dense;
    pol.topk = topk;
    size_t wsb = 0;
    BENCH_OK(mla::dsa_decode_workspace_size(a, pol, &wsb));
    void* ws = dalloc(wsb);
    us[i] = tm.time([&] { BENCH_OK(mla::dsa_decode(a, pol, mla::Workspace{ws, wsb}, {})); }, 9);
    cudaFree(ws);
  }
  const std::string shape = std::string(fp8 ? "fp8" : "bf16") + " b" + std::to_string(B) + " h" +
                            std::to_string(h) + " L" + std::to_string(L) +
                            (topk != 2048 ? " top" + std::to_string(topk) : "");
  std::printf("%-15s %-32s sparse step %9.1f us  dense %9.1f us  dense/sparse %.2fx\n", "dsa-step",
              shape.c_str(), us[0], us[1], us[1] / us[0]);
  std::fflush(stdout);
  g_rows.push_back({"dsa-step", shape, us[0], us[1], us[1] / us[0], 0,
                    "sparse us; dense us in tflops; dense/sparse in gbs"});
  cudaFree(kv), cudaFree(icache), cudaFree(q), cudaFree(q8), cudaFree(wf), cudaFree(bt),
      cudaFree(lens), cudaFree(out), cudaFree(lse);
  return {us[0], us[1]};
}

}  // namespace

int main(int argc, char** argv) {
  // Parsed with the options `mla bench` shares (tools/bench_suites.hpp); the old positional
  // form `mla_bench_dsa FILE SUITE` still works.
  const mla::cli::DsaBenchOptions opt = mla::cli::parse_dsa_bench(argc, argv);
  const std::string json = opt.json, only = opt.only;
  if (opt.peaks.read_gbps > 0) kReadGBs = opt.peaks.read_gbps;
  if (opt.peaks.bf16_tflops > 0) kBf16TF = opt.peaks.bf16_tflops;
  if (opt.peaks.fp8_tflops > 0) kFp8TF = opt.peaks.fp8_tflops;
  auto want = [&](const char* s) { return only == "all" || only == s; };
  Timer tm;
  if (want("indexer")) {
    for (int s_q : {1, 2})
      for (int64_t L : {32768L, 131072L}) bench_indexer_decode(tm, 128, s_q, L);
    for (int s_q : {3, 4}) bench_indexer_decode(tm, 128, s_q, 131072L);
    bench_indexer_prefill(tm, 4096, 32768);
  }
  // The prefill indexer alone at 32K and 128K.
  if (only == "indexer-prefill") {
    bench_indexer_prefill(tm, 4096, 32768);
    bench_indexer_prefill(tm, 4096, 131072);
  }
  if (want("topk")) {
    // The automatic plan on the issue's targets (128 x 128K, 4096 x 32K, 1 x 1M) and the DSA
    // decode shapes, both orders; then every kernel and cluster size on the targets (and 4096 x
    // 128K, the long prefill chunk). The SM clock read before and after.
    namespace tk = mla::cuda::topk;
    std::printf("sm clock before: %.0f MHz\n", sm_clock_mhz());
    warm_gpu(200);
    const std::pair<int64_t, int64_t> shapes[] = {{128, 131072}, {4096, 32768}, {1, 1048576},
                                                  {128, 32768},  {8, 131072},   {1, 262144}};
    for (const auto& [R, N] : shapes)
      for (bool best_first : {true, false}) {
        bench_topk(tm, R, N, 2048, true, nullptr, best_first);
        // The same plan with the sieve's L2 prefetch the other way (choose()'s
        // prefetch_pays, checked on each run).
        int sms = 0;
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
        tk::TopkPlan flipped = tk::choose(R, N, 2048, sms);
        flipped.l2_prefetch = !flipped.l2_prefetch;
        bench_topk(tm, R, N, 2048, true, &flipped, best_first);
      }
    bench_topk(tm, 128, 131072, 8192);
    for (const auto& [R, N] :
         {std::pair<int64_t, int64_t>{128, 131072}, {4096, 32768}, {1, 1048576}, {4096, 131072}})
      for (tk::Kernel kern : tk::kKernels)
        for (int cs : {1, 2, 4, 8}) {
          if (cs > 1 && R >= 64)
            continue;  // rows fill the GPU: a split loses (measured 2026-12-06)
          if (!tk::fits(kern, N, cs)) continue;  // a segment past the resident kernel's capacity
          const tk::TopkPlan plan{kern, cs};
          for (bool best_first : {true, false}) bench_topk(tm, R, N, 2048, true, &plan, best_first);
        }
    std::printf("sm clock at the end: %.0f MHz\n", sm_clock_mhz());
  }
  // Where a top-k CTA's time goes, phase by phase, on the targets' plans.
  if (only == "topk-probe") {
    namespace tk = mla::cuda::topk;
    bench_topk_probe<tk::Kernel::select_1024>(128, 131072, 1);
    bench_topk_probe<tk::Kernel::select_1024>(128, 131072, 1, false);
    bench_topk_probe<tk::Kernel::select_256>(4096, 32768, 1);
    bench_topk_probe<tk::Kernel::select_512>(4096, 32768, 1);
    bench_topk_probe<tk::Kernel::select_1024>(128, 32768, 1);
    bench_topk_probe<tk::Kernel::select_1024>(1, 1048576, 8);
    bench_topk_probe<tk::Kernel::select_1024>(8, 131072, 8);
  }
  if (only == "prefill-select") {
    bench_prefill_select(tm, 4096, 32768);
    bench_prefill_select(tm, 4096, 131072);
  }
  // The DSA decode step's top-k: few rows (B 1-128) of 4K-256K logits, unordered
  // output (the step asks by position); every kernel and cluster size that takes the shape,
  // after the automatic plan, so choose() can be checked where fixed costs dominate.
  if (only == "topk-short") {
    namespace tk = mla::cuda::topk;
    for (int64_t R : {1L, 4L, 8L, 16L, 64L, 128L})
      for (int64_t N : {4096L, 8192L, 16384L, 32768L, 65536L, 131072L, 262144L}) {
        bench_topk(tm, R, N, 2048, true, nullptr, false);
        for (tk::Kernel kern : tk::kKernels)
          for (int cs : {1, 2, 4, 8}) {
            if (!tk::fits(kern, N, cs) || N / cs < 2048) continue;
            const tk::TopkPlan plan{kern, cs};
            bench_topk(tm, R, N, 2048, true, &plan, false);
          }
      }
  }
  // One top-k shape with the automatic plan (for a profiler): topk-one R N [k].
  if (only == "topk-one" && argc > 4)
    bench_topk(tm, std::atoll(argv[3]), std::atoll(argv[4]), argc > 5 ? std::atoi(argv[5]) : 2048);
  // The read alone in the select's loop shape: what a one-read select can reach.
  if (only == "topk-read") {
    bench_topk_read<1024, 2, 2>(tm, 128, 131072, 1);
    bench_topk_read<1024, 2, 4>(tm, 128, 131072, 1);
    bench_topk_read<512, 2, 4>(tm, 128, 131072, 1);
    bench_topk_read<512, 2, 8>(tm, 128, 131072, 1);
    bench_topk_read<512, 2, 2>(tm, 128, 131072, 2);
    bench_topk_read<512, 2, 4>(tm, 128, 131072, 2);
    bench_topk_read<256, 4, 4>(tm, 128, 131072, 4);
    bench_topk_read<512, 2, 2>(tm, 4096, 32768, 1);
    bench_topk_read<512, 2, 4>(tm, 4096, 32768, 1);
    bench_topk_read<1024, 2, 2>(tm, 1, 1048576, 8);
    bench_topk_read<1024, 2, 4>(tm, 1, 1048576, 16);
    bench_topk_read<512, 2, 4>(tm, 1, 1048576, 64);
  }
  if (want("sparse-decode")) {
    for (bool fp8 : {true, false})
      for (int s_q : {1, 2}) {
        bench_sparse(tm, "sparse-decode", 128, s_q, 128, 32768, 2048, fp8);
        bench_sparse(tm, "sparse-decode", 64, s_q, 128, 32768, 2048, fp8);
      }
    for (int h : {64, 32, 16}) bench_sparse(tm, "sparse-decode", 128, 1, h, 32768, 2048, false);
    bench_sparse(tm, "sparse-decode", 128, 1, 16, 32768, 2048, true);
    // The decode kernel's one-way math form (not chosen automatically), same run.
    const auto oneway = mla::cuda::sparse::Kernel::decode_oneway;
    for (bool fp8 : {true, false})
      for (int s_q : {1, 2}) {
        bench_sparse(tm, "sparse-decode", 128, s_q, 128, 32768, 2048, fp8, true, oneway);
        bench_sparse(tm, "sparse-decode", 64, s_q, 128, 32768, 2048, fp8, true, oneway);
      }
    bench_sparse(tm, "sparse-decode", 128, 1, 16, 32768, 2048, true, true, oneway);
    // The fp8 producer's sector-pair loads (decode_wgmma_sp, not chosen automatically),
    // same run: the rows to set against the automatic fp8 rows above.
    const auto pairs = mla::cuda::sparse::Kernel::decode_wgmma_sp;
    for (int s_q : {1, 2}) {
      bench_sparse(tm, "sparse-decode", 128, s_q, 128, 32768, 2048, true, true, pairs);
      bench_sparse(tm, "sparse-decode", 64, s_q, 128, 32768, 2048, true, true, pairs);
    }
    bench_sparse(tm, "sparse-decode", 128, 1, 16, 32768, 2048, true, true, pairs);
  }
  // FlashMLA's sparse prefill shapes (s_q 4096, top-2048; h_q 64; s_q 16K):
  // the automatic choice (the prefill kernel) and the decode kernel it
  // replaced, same run.
  if (want("sparse-prefill")) {
    using mla::cuda::sparse::Kernel;
    for (int64_t skv : {8192L, 32768L, 131072L})
      for (Kernel k : {Kernel::automatic, Kernel::decode_wgmma})
        bench_sparse_prefill(tm, 4096, 128, skv, 2048, k);
    for (int64_t skv : {8192L, 32768L, 131072L})
      bench_sparse_prefill(tm, 4096, 64, skv, 2048, Kernel::automatic);
    for (int64_t skv : {32768L, 131072L})
      bench_sparse_prefill(tm, 16384, 128, skv, 2048, Kernel::automatic);
    // A cached fp8 prefix (fp8_ds_mla entries dequantised in the gather).
    for (int64_t skv : {8192L, 131072L})
      bench_sparse_prefill(tm, 4096, 128, skv, 2048, Kernel::automatic, true);
  }
  // docs/benchmarks.md's dsa-vs-dense: the whole public DSA step against dense decode of
  // the same cache at B 128 (both cache formats: the fp8 DSA step against bf16
  // dense is the two rows' ratio). Stage by stage: the "stages" mode.
  if (want("dsa-vs-dense"))
    for (int64_t L : {32768L, 65536L, 131072L})
      for (bool fp8 : {false, true}) bench_dsa_step(tm, 128, 128, L, fp8);
  // Each DSA stage alone over a (batch, context) grid around the layer study's
  // points (docs/layer-study.md): the planner's calibration fits a per-call
  // overhead and a fraction of the floor per stage from these.
  if (only == "stages")
    for (int B : {4, 16, 64})
      for (int64_t L : {8192L, 32768L, 131072L}) {
        bench_indexer_decode(tm, B, 1, L);
        bench_topk(tm, B, L, 2048);
        for (bool fp8 : {false, true}) bench_sparse(tm, "sparse-decode", B, 1, 128, L, 2048, fp8);
      }
  // The DSA step against top-k at 128K (the seed's "DSA parameters" question:
  // what the selection size costs), dense decode beside it.
  if (only == "topk-sweep")
    for (bool fp8 : {false, true})
      for (int k : {512, 1024, 2048, 4096}) bench_dsa_step(tm, 64, 128, 131072, fp8, k);
  if (want("dsa-step"))
    for (bool fp8 : {false, true})
      for (int64_t L : {2048L, 3072L, 4096L, 6144L, 8192L, 16384L, 32768L, 65536L, 131072L})
        bench_dsa_step(tm, 64, 128, L, fp8);
  FILE* f = std::fopen(json.c_str(), "w");
  if (f) {
    std::fprintf(f, "[\n");
    for (size_t i = 0; i < g_rows.size(); ++i) {
      const Row& r = g_rows[i];
      std::fprintf(f,
                   "  {\"suite\": \"%s\", \"shape\": \"%s\", \"us\": %.3f, \"tflops\": %.3f, "
                   "\"gbs\": %.3f, \"fraction\": %.4f, \"of\": \"%s\"}%s\n",
                   r.suite.c_str(), r.shape.c_str(), r.us, r.tflops, r.gbs, r.frac,
                   r.frac_of.c_str(), i + 1 < g_rows.size() ? "," : "");
    }
    std::fprintf(f, "]\n");
    std::fclose(f);
  }
  return 0;
}
