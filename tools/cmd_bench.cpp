// mla bench decode: the decode suites of docs/benchmarks.md on the GPU.
//
// Per shape: a paged cache of random data (page 64, shuffled page ids), the
// whole decode step (scheduler + main + combine) timed with CUDA events around
// each call, the L2 flushed before every call (a 256 MB memset outside the
// timed region: the cache is read from HBM as in a real step), 5 warm-up
// calls, the median of --reps calls. Reported: time, TFLOP/s (2*h_q*(576+512)
// per query and attended key, causal counted exactly), GB/s (each cache entry
// once per request + q + out + lse), the roofline floor from the measured H200
// ceilings (docs/benchmarks.md: 792 TFLOP/s bf16, 4391 GB/s read) and the fraction of it.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "commands.hpp"
#include "mla/decode.hpp"
#include "mla/dims.hpp"

#ifdef MLA_HAS_CUDA
#include <cuda_runtime.h>

#include "bench/bench_check.hpp"
#include "bench/bench_timing.hpp"
#include "cuda/common/random_fill.hpp"
#endif

namespace mla::cli {
namespace {

struct BenchOptions {
  std::string suite = "all";
  std::string json;
  int reps = 30;
  bool batch_invariant = false;
  double peak_tflops = 792.0;  // docs/benchmarks.md, measured on the H200 we are lent
  double peak_gbps = 4391.0;
  std::vector<std::string> only;  // run only shapes whose "<name> <format>" contains one of these
};

struct Shape {
  std::string suite;
  std::vector<int32_t> lengths;
  int h_q = 128, s_q = 1;
  KvFormat format = KvFormat::bf16;
  std::string label;
};

std::vector<Shape> suite_shapes(const std::string& which) {
  std::vector<Shape> v;
  auto want = [&](const char* s) { return which == "all" || which == s; };
  auto uniform = [](int B, int L) { return std::vector<int32_t>(B, L); };
  const int Ls[] = {4096, 8192, 16384, 32768};
  for (KvFormat f : {KvFormat::bf16, KvFormat::fp8_ds_mla}) {
    if (want("decode-128"))
      for (int B : {128, 64})
        for (int s_q : {1, 2})
          for (int L : Ls) v.push_back({"decode-128", uniform(B, L), 128, s_q, f, ""});
    if (want("decode-tp"))
      for (int h : {16, 32})
        for (int L : Ls) v.push_back({"decode-tp", uniform(128, L), h, 1, f, ""});
    if (want("decode-varlen")) {
      v.push_back({"decode-varlen", {4641, 45118, 1730, 1696}, 16, 4, f, "B4 ragged"});
      std::mt19937 rng(1234);
      std::vector<int32_t> l64(64);
      for (auto& x : l64) x = std::uniform_int_distribution<int>(256, 1024)(rng);
      v.push_back({"decode-varlen", l64, 16, 4, f, "B64 U[256,1024]"});
      v.push_back({"decode-varlen", uniform(1, 65536), 16, 1, f, "B1 64K"});
      v.push_back({"decode-varlen", uniform(132, 4096), 16, 4, f, "B132 4K"});
    }
    if (want("decode-long"))
      for (int B : {1, 8})
        for (int L : {131072, 262144}) v.push_back({"decode-long", uniform(B, L), 128, 1, f, ""});
  }
  return v;
}

#ifdef MLA_HAS_CUDA
std::string shape_name(const Shape& s) {
  if (!s.label.empty()) return s.label;
  return "b" + std::to_string(s.lengths.size()) + " h" + std::to_string(s.h_q) + " s_q" +
         std::to_string(s.s_q) + " L" + std::to_string(s.lengths[0] / 1024) + "K";
}

struct DeviceMem {
  void* p = nullptr;
  explicit DeviceMem(size_t bytes) { BENCH_CUDA(cudaMalloc(&p, std::max<size_t>(bytes, 256))); }
  ~DeviceMem() { cudaFree(p); }
  DeviceMem(const DeviceMem&) = delete;
  DeviceMem& operator=(const DeviceMem&) = delete;
};

nlohmann::json bench_shape(const Shape& s, const BenchOptions& o) {
  constexpr int kPage = 64;
  const int B = int(s.lengths.size());
  const bool fp8 = s.format == KvFormat::fp8_ds_mla;
  const int64_t entry = fp8 ? 656 : 1152;
  int64_t max_pages = 0, num_pages = 0;
  for (int32_t L : s.lengths) {
    const int64_t p = (L + kPage - 1) / kPage;
    max_pages = std::max(max_pages, p);
    num_pages += p;
  }
  DeviceMem kv(num_pages * kPage * entry), q(int64_t(B) * s.s_q * s.h_q * kDqk * 2),
      out(int64_t(B) * s.s_q * s.h_q * kDv * 2), lse(int64_t(B) * s.h_q * s.s_q * 4),
      bt(int64_t(B) * max_pages * 4), lens(B * 4);
  // Random cache and q; each request's pages are a random permutation of the pool.
  if (fp8)
    BENCH_CUDA(cuda::fill_fp8_ds_mla(kv.p, num_pages * kPage, entry, 7, nullptr));
  else
    BENCH_CUDA(cuda::fill_uniform_bf16(kv.p, num_pages * kPage * kDqk, -1.f, 1.f, 7, nullptr));
  BENCH_CUDA(
      cuda::fill_uniform_bf16(q.p, int64_t(B) * s.s_q * s.h_q * kDqk, -1.f, 1.f, 8, nullptr));
  std::vector<int32_t> ids(num_pages), table(int64_t(B) * max_pages, 0);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(99));
  int64_t next = 0;
  for (int b = 0; b < B; ++b)
    for (int64_t j = 0; j < (s.lengths[b] + kPage - 1) / kPage; ++j)
      table[b * max_pages + j] = ids[next++];
  BENCH_CUDA(cudaMemcpy(bt.p, table.data(), table.size() * 4, cudaMemcpyHostToDevice));
  BENCH_CUDA(cudaMemcpy(lens.p, s.lengths.data(), B * 4, cudaMemcpyHostToDevice));

  DecodeArgs a;
  const Device dev = Device::cuda(0);
  a.q = TensorView::make(q.p, DType::bf16, {B, s.s_q, s.h_q, kDqk}, dev);
  a.kv.format = s.format;
  a.kv.data = TensorView::make(kv.p, fp8 ? DType::u8 : DType::bf16,
                               {num_pages, kPage, 1, fp8 ? 656 : kDqk}, dev);
  a.block_table = TensorView::make(bt.p, DType::i32, {B, max_pages}, dev);
  a.cache_seqlens = TensorView::make(lens.p, DType::i32, {B}, dev);
  a.softmax_scale = float(deepseek_v32_softmax_scale());
  a.out = TensorView::make(out.p, DType::bf16, {B, s.s_q, s.h_q, kDv}, dev);
  a.lse = TensorView::make(lse.p, DType::f32, {B, s.h_q, s.s_q}, dev);
  DecodeOptions opts;
  opts.batch_invariant = o.batch_invariant;
  size_t ws_bytes = 0;
  Status st = decode_workspace_size(a, opts, &ws_bytes);
  if (!st.ok()) {
    std::fprintf(stderr, "workspace: %s\n", st.to_string().c_str());
    std::exit(1);
  }
  DeviceMem ws(ws_bytes);
  const BenchTime t = time_events(BenchTiming{o.reps, 5, /*flush_l2=*/true}, [&] {
    BENCH_OK(mla_decode(a, opts, Workspace{ws.p, ws_bytes}, {}));
  });
  const double t_us = t.median_us;
  const double spread_us = t.p90_us - t.p10_us;

  // Work and bytes, exactly.
  double flops = 0, bytes = 0;
  for (int32_t L : s.lengths) {
    for (int i = 0; i < s.s_q; ++i)
      flops += 2.0 * s.h_q * (kDqk + kDv) * std::max(0, L - (s.s_q - 1 - i));
    bytes += double(L) * entry;
  }
  bytes += double(B) * s.s_q * s.h_q * (kDqk * 2 + kDv * 2 + 4);
  const double floor_us =
      std::max(flops / (o.peak_tflops * 1e12), bytes / (o.peak_gbps * 1e9)) * 1e6;
  const bool compute_bound = flops / (o.peak_tflops * 1e12) > bytes / (o.peak_gbps * 1e9);
  const std::string name = shape_name(s);
  nlohmann::json j;
  j["suite"] = s.suite;
  j["name"] = name;
  j["format"] = kv_format_name(s.format);
  j["batch"] = B;
  j["h_q"] = s.h_q;
  j["s_q"] = s.s_q;
  j["page_size"] = kPage;
  j["lengths_sum"] = std::accumulate(s.lengths.begin(), s.lengths.end(), int64_t(0));
  j["batch_invariant"] = o.batch_invariant;
  j["time_us"] = t_us;
  j["spread_p10_p90_us"] = spread_us;
  j["tflops"] = flops / (t_us * 1e-6) / 1e12;
  j["gbps"] = bytes / (t_us * 1e-6) / 1e9;
  j["floor_us"] = floor_us;
  j["fraction_of_floor"] = floor_us / t_us;
  j["bound"] = compute_bound ? "compute" : "memory";
  j["workspace_bytes"] = ws_bytes;
  return j;
}
#endif

int run_decode_bench(const BenchOptions& o) {
#ifndef MLA_HAS_CUDA
  std::fprintf(stderr, "mla bench decode: this build has no CUDA\n");
  return 2;
#else
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::fprintf(stderr, "mla bench decode: no CUDA device\n");
    return 2;
  }
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  nlohmann::json results = nlohmann::json::array();
  std::printf("%-14s %-22s %-10s %10s %9s %9s %9s %8s %s\n", "suite", "shape", "cache", "time_us",
              "TFLOP/s", "GB/s", "floor_us", "of_floor", "bound");
  for (const Shape& s : suite_shapes(o.suite)) {
    const std::string key = shape_name(s) + " " + kv_format_name(s.format);
    if (!o.only.empty() && std::none_of(o.only.begin(), o.only.end(), [&](const std::string& f) {
          return key.find(f) != std::string::npos;
        }))
      continue;
    nlohmann::json j = bench_shape(s, o);
    std::printf("%-14s %-22s %-10s %10.1f %9.1f %9.0f %9.1f %7.1f%% %s\n",
                j["suite"].get<std::string>().c_str(), j["name"].get<std::string>().c_str(),
                j["format"].get<std::string>().c_str(), j["time_us"].get<double>(),
                j["tflops"].get<double>(), j["gbps"].get<double>(), j["floor_us"].get<double>(),
                100 * j["fraction_of_floor"].get<double>(), j["bound"].get<std::string>().c_str());
    std::fflush(stdout);
    results.push_back(j);
  }
  if (!o.json.empty()) {
    nlohmann::json doc;
    doc["device"] = prop.name;
    doc["sm_count"] = prop.multiProcessorCount;
    doc["peak_tflops_bf16"] = o.peak_tflops;
    doc["peak_read_gbps"] = o.peak_gbps;
    doc["reps"] = o.reps;
    doc["timing"] =
        "CUDA events per call, L2 flushed (256 MB memset) before each, 5 warm-up, median";
    doc["results"] = results;
    std::ofstream(o.json) << doc.dump(1) << "\n";
  }
  return 0;
#endif
}

}  // namespace

void register_bench_command(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "benchmarks on the GPU (docs/benchmarks.md suites)");
  bench->require_subcommand(1);
  auto* dec = bench->add_subcommand("decode", "dense MLA decode suites");
  auto o = std::make_shared<BenchOptions>();
  dec->add_option("--suite", o->suite, "decode-128 | decode-tp | decode-varlen | decode-long | all")
      ->check(CLI::IsMember({"decode-128", "decode-tp", "decode-varlen", "decode-long", "all"}));
  dec->add_option("--json", o->json, "write the results as JSON to this file");
  dec->add_option("--reps", o->reps, "timed calls per shape (median reported)")
      ->check(CLI::Range(5, 10000));
  dec->add_flag("--batch-invariant", o->batch_invariant, "DecodeOptions::batch_invariant");
  dec->add_option("--only", o->only,
                  "run only the shapes whose \"<name> <format>\" contains one of these "
                  "(e.g. \"b128 h128 s_q1 L32K bf16\"; repeatable)");
  dec->add_option("--peak-tflops", o->peak_tflops, "bf16 matmul ceiling for the floor");
  dec->add_option("--peak-gbps", o->peak_gbps, "read bandwidth ceiling for the floor");
  dec->callback([o] { std::exit(run_decode_bench(*o)); });
}

}  // namespace mla::cli
