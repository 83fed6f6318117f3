// mla_bench_layer: the decode loop of the layer study (docs/layer-study.md,
// issue 8). One DeepSeek-V3.2 attention layer (real dimensions, synthetic
// weights) steps B requests x 1 new token at context L, for MLA bf16, MLA fp8,
// MLA + DSA (bf16 and fp8 caches); B defaults to the planner's largest batch
// for that cache (the full model's weights accounted beside 61 layers of KV).
// Reports per point: the median step time of the whole layer (projections
// included), KV per request, bytes moved (cache + indexer cache + weights),
// FLOPs, achieved GB/s and TFLOP/s, and the planner's attention floor.
// Timing: CUDA events, warm-up, median of --reps calls; the caches and weights
// are far larger than the 60 MB L2 at every point.
// Usage: mla bench layer --help (or mla_bench_layer --help: the same options).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench_check.hpp"
#include "bench_suites.hpp"
#include "bench_timing.hpp"
#include "cuda/common/random_fill.hpp"
#include "mla/dsa.hpp"
#include "mla/indexer.hpp"
#include "mla/layer.hpp"
#include "mla/plan.hpp"

namespace {

using namespace mla;

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');) out.push_back(x);
  return out;
}

// The layer's weights on the device: matrices bf16 uniform in +-sqrt(3 / in)
// (init_layer_weights' scale), norm weights f32 near 1.
struct GpuWeights {
  std::vector<DeviceBuffer*> bufs;
  LayerWeights views;
  explicit GpuWeights(const LayerConfig& c) {
    LayerWeightShape s[kLayerWeightCount];
    BENCH_OK(layer_weight_shapes(c, s));
    for (int i = 0; i < kLayerWeightCount; ++i) {
      int64_t n = 1;
      for (int d = 0; d < s[i].ndim; ++d) n *= s[i].shape[d];
      const bool vec = s[i].ndim == 1;
      auto* b = new DeviceBuffer(size_t(n) * (vec ? 4 : 2));
      bufs.push_back(b);
      TensorView& v = layer_weight(views, i);
      const DType t = vec ? DType::f32 : DType::bf16;
      if (s[i].ndim == 1) v = TensorView::make(b->p, t, {s[i].shape[0]}, Device::cuda(0));
      if (s[i].ndim == 2)
        v = TensorView::make(b->p, t, {s[i].shape[0], s[i].shape[1]}, Device::cuda(0));
      if (s[i].ndim == 3)
        v = TensorView::make(b->p, t, {s[i].shape[0], s[i].shape[1], s[i].shape[2]},
                             Device::cuda(0));
      if (vec) {
        std::vector<float> h(n);
        for (int64_t j = 0; j < n; ++j) h[j] = (i == 11 ? 0.f : 1.f) + 0.05f * float((j % 7) - 3);
        BENCH_CUDA(cudaMemcpy(b->p, h.data(), n * 4, cudaMemcpyHostToDevice));
      } else {
        const float a = std::sqrt(3.f / float(s[i].shape[s[i].ndim - 1]));
        BENCH_CUDA(cuda::fill_uniform_bf16(b->p, n, -a, a, 1000 + i, nullptr));
      }
    }
  }
  ~GpuWeights() {
    for (DeviceBuffer* b : bufs) delete b;
  }
  double params() const {
    double n = 0;
    for (int i = 0; i < kLayerWeightCount; ++i) n += double(layer_weight(views, i).numel());
    return n;
  }
};

struct Point {
  std::string config;
  int64_t context = 0, batch = 0;
  double median_us = 0, min_us = 0;
  double attention_us = 0;                // the layer's attention op alone, same caches and shapes
  double kv_bytes_per_request = 0;        // 61 layers + indexer (the planner's)
  double bytes = 0, flops = 0;            // one layer, one step
  double planner_attention_floor_us = 0;  // one layer (planner's 61-layer step / 61)
};

Point run_point(const std::string& name, int64_t L, int64_t batch_override, int reps) {
  const bool dsa = name.find("+dsa") != std::string::npos;
  const bool fp8 = name.find("fp8") != std::string::npos;
  const LayerConfig c = deepseek_v32_layer();

  // The planner: the largest batch with this cache and its attention floor.
  plan::Workload w;
  w.context = L;
  w.kv = fp8 ? plan::KvPrecision::fp8 : plan::KvPrecision::bf16;
  w.batch = batch_override;
  plan::Plan p;
  BENCH_OK(plan::make_plan(w, nullptr, &p));
  const plan::FormatPlan* fp = nullptr;
  for (const auto& f : p.formats)
    if (f.name == name) fp = &f;
  if (fp == nullptr) {
    std::fprintf(stderr, "no planner row named %s\n", name.c_str());
    std::exit(1);
  }
  Point pt;
  pt.config = name;
  pt.context = L;
  pt.batch = p.workload.batch;
  pt.kv_bytes_per_request = fp->kv_bytes_per_request;
  pt.planner_attention_floor_us = fp->step.floor_s / 61.0 * 1e6;
  const int64_t B = pt.batch, page = 64, pages_per_req = (L + page - 1) / page;
  const int64_t num_pages = B * pages_per_req;

  // One layer's caches for B requests, filled with random entries.
  const KvFormat f = fp8 ? KvFormat::fp8_ds_mla : KvFormat::bf16;
  const int64_t entry = kv_entry_bytes(f);
  DeviceBuffer kv(size_t(num_pages) * page * entry);
  if (fp8)
    BENCH_CUDA(cuda::fill_fp8_ds_mla(kv.p, num_pages * page, entry, 7, nullptr));
  else
    BENCH_CUDA(cuda::fill_uniform_bf16(kv.p, num_pages * page * kDqk, -1.f, 1.f, 7, nullptr));
  DeviceBuffer index(size_t(num_pages) * IndexerCacheLayout::kPageBytes);
  {  // indexer keys through the library's quantiser, a chunk of pages at a time
    const int64_t chunk = 64 * 1024;
    DeviceBuffer keys(chunk * kIndexerDim * 2), slots(chunk * 8);
    std::vector<int64_t> h(chunk);
    for (int64_t s0 = 0; s0 < num_pages * page; s0 += chunk) {
      const int64_t n = std::min(chunk, num_pages * page - s0);
      for (int64_t i = 0; i < n; ++i) h[i] = s0 + i;
      BENCH_CUDA(cudaMemcpy(slots.p, h.data(), n * 8, cudaMemcpyHostToDevice));
      BENCH_CUDA(cuda::fill_uniform_bf16(keys.p, n * kIndexerDim, -1.f, 1.f, 11 + s0, nullptr));
      AppendIndexerKeysArgs a;
      a.keys = TensorView::make(keys.p, DType::bf16, {n, kIndexerDim}, Device::cuda(0));
      a.slots = TensorView::make(slots.p, DType::i64, {n}, Device::cuda(0));
      a.cache.data = TensorView::make(index.p, DType::u8,
                                      {num_pages, IndexerCacheLayout::kPageBytes}, Device::cuda(0));
      BENCH_OK(append_indexer_keys(a));
    }
  }
  std::vector<int32_t> table(B * pages_per_req), lens(B, int32_t(L));
  for (size_t i = 0; i < table.size(); ++i) table[i] = int32_t(i);
  DeviceBuffer table_d(table.size() * 4), lens_d(B * 4), hidden(B * c.hidden * 2),
      out(B * c.hidden * 2);
  BENCH_CUDA(cudaMemcpy(table_d.p, table.data(), table.size() * 4, cudaMemcpyHostToDevice));
  BENCH_CUDA(cudaMemcpy(lens_d.p, lens.data(), B * 4, cudaMemcpyHostToDevice));
  BENCH_CUDA(cuda::fill_uniform_bf16(hidden.p, B * c.hidden, -1.7f, 1.7f, 5, nullptr));
  GpuWeights weights(c);

  LayerForwardArgs a;
  a.config = c;
  a.weights = weights.views;
  a.hidden = TensorView::make(hidden.p, DType::bf16, {B, 1, c.hidden}, Device::cuda(0));
  a.kv.data =
      fp8 ? TensorView::make(kv.p, DType::u8, {num_pages, page, 1, entry}, Device::cuda(0))
          : TensorView::make(kv.p, DType::bf16, {num_pages, page, 1, kDqk}, Device::cuda(0));
  a.kv.format = f;
  a.index_cache.data = TensorView::make(
      index.p, DType::u8, {num_pages, IndexerCacheLayout::kPageBytes}, Device::cuda(0));
  a.block_table = TensorView::make(table_d.p, DType::i32, {B, pages_per_req}, Device::cuda(0));
  a.cache_seqlens = TensorView::make(lens_d.p, DType::i32, {B}, Device::cuda(0));
  a.attention = dsa ? LayerAttention::sparse : LayerAttention::absorbed;
  a.out = TensorView::make(out.p, DType::bf16, {B, 1, c.hidden}, Device::cuda(0));
  size_t ws_bytes = 0;
  BENCH_OK(layer_workspace_size(a, &ws_bytes));
  DeviceBuffer ws(ws_bytes);

  // Caches and weights are far larger than the L2: no flush between calls.
  const BenchTime step = time_events(reps, 3, [&] {
    BENCH_OK(layer_forward(a, Workspace{ws.p, ws_bytes}));
  });
  pt.median_us = step.median_us;
  pt.min_us = step.min_us;

  // The attention op alone on the same caches (random queries): what the rest
  // of the layer (projections, norms, RoPE, absorption, cache append) costs is
  // the difference. The sparse path is the layer's: indexer -> top-k -> sparse.
  {
    DeviceBuffer q(B * c.heads * kDqk * 2), o(B * c.heads * kDv * 2), lse(B * c.heads * 4),
        q8(B * kIndexerHeads * kIndexerDim), wf(B * kIndexerHeads * 4);
    BENCH_CUDA(cuda::fill_uniform_bf16(q.p, B * c.heads * kDqk, -1.f, 1.f, 17, nullptr));
    BENCH_CUDA(cudaMemset(q8.p, 0x38, B * kIndexerHeads * kIndexerDim));  // e4m3 1.0
    std::vector<float> wh(B * kIndexerHeads);
    for (size_t i = 0; i < wh.size(); ++i) wh[i] = 0.01f * float(int(i % 13) - 6);
    BENCH_CUDA(cudaMemcpy(wf.p, wh.data(), wh.size() * 4, cudaMemcpyHostToDevice));
    const Device dev = Device::cuda(0);
    DsaDecodeArgs d;
    d.q = TensorView::make(q.p, DType::bf16, {B, 1, c.heads, kDqk}, dev);
    d.kv = a.kv;
    d.block_table = a.block_table;
    d.cache_seqlens = a.cache_seqlens;
    d.max_seqlen = L;
    d.index_q8 = TensorView::make(q8.p, DType::e4m3, {B, 1, kIndexerHeads, kIndexerDim}, dev);
    d.index_w_folded = TensorView::make(wf.p, DType::f32, {B, 1, kIndexerHeads}, dev);
    d.index_cache = a.index_cache;
    d.softmax_scale = float(layer_softmax_scale(c));
    d.out = TensorView::make(o.p, DType::bf16, {B, 1, c.heads, kDv}, dev);
    d.lse = TensorView::make(lse.p, DType::f32, {B, c.heads, 1}, dev);
    DsaPolicy pol;
    pol.topk = int32_t(c.index_topk);
    pol.path = dsa ? DsaPath::sparse : DsaPath::dense;
    size_t attn_bytes = 0;
    BENCH_OK(dsa_decode_workspace_size(d, pol, &attn_bytes));
    DeviceBuffer attn_ws(attn_bytes);
    pt.attention_us = time_events(reps, 3, [&] {
                        BENCH_OK(dsa_decode(d, pol, Workspace{attn_ws.p, attn_bytes}));
                      }).median_us;
  }

  // Bytes and FLOPs of one layer step: the weights once, the cache entries the
  // attention reads, the indexer cache (every key, DSA), activations ignored.
  const double keys = dsa ? std::min<double>(L, c.index_topk) : double(L);
  const double wparams = weights.params();
  pt.bytes = 2.0 * wparams + double(B) * keys * double(entry) +
             (dsa ? double(B) * L * (IndexerCacheLayout::kPageBytes / 64.0) : 0.0);
  pt.flops = 2.0 * wparams * B + 2.0 * B * c.heads * keys * (kDc + kDr + kDc) +
             (dsa ? 2.0 * B * L * kIndexerHeads * kIndexerDim : 0.0);
  return pt;
}

}  // namespace

int main(int argc, char** argv) {
  // Parsed with the options `mla bench layer` shares (tools/bench_suites.hpp).
  const mla::cli::LayerBenchOptions opt =
      mla::cli::parse_bench<mla::cli::LayerBenchOptions>(argc, argv);
  const std::string json = opt.json, contexts = opt.contexts, configs = opt.configs;
  const int reps = opt.reps;
  const int64_t batch = opt.batch;
  std::vector<Point> pts;
  std::printf("%-14s %8s %6s %12s %10s %10s %14s %12s %10s %10s %14s\n", "config", "context",
              "batch", "step us", "attn us", "rest us", "KV/request", "bytes", "GB/s", "TFLOP/s",
              "plan attn us");
  for (const std::string& cfg : split(configs))
    for (const std::string& ctx : split(contexts)) {
      const Point p = run_point(cfg, std::atoll(ctx.c_str()), batch, reps);
      pts.push_back(p);
      std::printf(
          "%-14s %8lld %6lld %12.1f %10.1f %10.1f %11.2f GB %9.2f GB %10.0f %10.1f %14.1f\n",
          p.config.c_str(), (long long)p.context, (long long)p.batch, p.median_us, p.attention_us,
          p.median_us - p.attention_us, p.kv_bytes_per_request / 1e9, p.bytes / 1e9,
          p.bytes / p.median_us / 1e3, p.flops / p.median_us / 1e6, p.planner_attention_floor_us);
      std::fflush(stdout);
    }
  if (!json.empty()) {
    std::ofstream o(json);
    o << "{\n  \"bench\": \"layer\",\n  \"model\": \"deepseek-v3.2 (one attention layer, synthetic "
         "weights)\",\n  \"points\": [\n";
    for (size_t i = 0; i < pts.size(); ++i) {
      const Point& p = pts[i];
      o << "    {\"config\": \"" << p.config << "\", \"context\": " << p.context
        << ", \"batch\": " << p.batch << ", \"median_us\": " << p.median_us
        << ", \"min_us\": " << p.min_us << ", \"attention_us\": " << p.attention_us
        << ", \"kv_bytes_per_request\": " << p.kv_bytes_per_request << ", \"bytes\": " << p.bytes
        << ", \"flops\": " << p.flops
        << ", \"planner_attention_floor_us\": " << p.planner_attention_floor_us << "}"
        << (i + 1 < pts.size() ? "," : "") << "\n";
    }
    o << "  ]\n}\n";
  }
  return 0;
}
