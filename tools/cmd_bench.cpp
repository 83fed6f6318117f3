// `mla bench <suite>`: the benchmark suites of docs/benchmarks.md on the GPU, one front end.
// decode runs here; sparse, indexer, topk, prefill and layer run their suite programs
// (mla_bench_dsa, mla_bench_prefill, mla_bench_layer: beside this binary in a build, in
// libexec/mla when installed) with the options parsed here (tools/bench_suites.hpp: the
// same CLI11 definitions). Every suite starts by measuring the ceilings on this machine
// (tools/ceilings.hpp) and writes one JSON document (--json FILE, "mla_bench" key) that
// `mla plan --calibrate FILE` accepts: rows the planner can fit carry a "calibration" key.
//
// decode, per shape: // a paged cache of random data (page 64, shuffled page ids), the
// whole decode step (scheduler + main + combine) timed with CUDA events around
// each call, the L2 flushed before every call (a 256 MB memset outside the
// timed region: the cache is read from HBM as in a real step), 5 warm-up
// calls, the median of --reps calls. Reported: time, TFLOP/s (2*h_q*(576+512)
// per query and attended key, causal counted exactly), GB/s (each cache entry
// once per request + q + out + lse), the roofline floor from the ceilings measured at
// the start, and the fraction of it.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench_calibration.hpp"
#include "bench_suites_cli.hpp"
#include "ceilings.hpp"
#include "commands.hpp"
#include "mla/decode.hpp"
#include "mla/dims.hpp"
#include "mla/plan.hpp"

#ifdef MLA_HAS_CUDA
#include <cuda_runtime.h>

#include "bench/bench_check.hpp"
#include "bench/bench_timing.hpp"
#include "cuda/common/random_fill.hpp"
#include "cuda/decode/decode_cuda.hpp"
#endif

namespace mla::cli {
namespace {

struct BenchOptions {
  std::string suite = "all";
  std::string json;
  int reps = 30;
  bool batch_invariant = false;
  // The decode backend's kernel by name (cuda::decode::kernel_name); "automatic":
  // the public mla_decode. A kernel that cannot run a shape fails the run.
  std::string kernel = "automatic";
  BenchCeilings peaks;            // measured at the start unless given
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
  for (KvFormat f : {KvFormat::bf16, KvFormat::fp8_ds_mla, KvFormat::fp8_e4m3}) {
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

nlohmann::json bench_shape(const Shape& s, const BenchOptions& o) {
  constexpr int kPage = 64;
  const int B = int(s.lengths.size());
  const bool fp8 = kv_format_is_fp8(s.format);
  const int64_t entry = kv_entry_bytes(s.format);
  int64_t max_pages = 0, num_pages = 0;
  for (int32_t L : s.lengths) {
    const int64_t p = (L + kPage - 1) / kPage;
    max_pages = std::max(max_pages, p);
    num_pages += p;
  }
  DeviceBuffer kv(num_pages * kPage * entry), q(int64_t(B) * s.s_q * s.h_q * kDqk * 2),
      out(int64_t(B) * s.s_q * s.h_q * kDv * 2), lse(int64_t(B) * s.h_q * s.s_q * 4),
      bt(int64_t(B) * max_pages * 4), lens(B * 4);
  // Random cache and q; each request's pages are a random permutation of the pool.
  DeviceBuffer k_scale(4);
  if (s.format == KvFormat::fp8_ds_mla) {
    BENCH_CUDA(cuda::fill_fp8_ds_mla(kv.p, num_pages * kPage, entry, 7, nullptr));
  } else if (s.format == KvFormat::fp8_e4m3) {
    // bf16 values in [1, 1 + 2^-7) are the byte pair 0x80 0x3f: valid e4m3
    // codes (-0, 0.9375); the kernel's time does not depend on the values.
    BENCH_CUDA(
        cuda::fill_uniform_bf16(kv.p, num_pages * kPage * entry / 2, 1.f, 1.0078f, 7, nullptr));
    const float one = 1.f;
    BENCH_CUDA(cudaMemcpy(k_scale.p, &one, 4, cudaMemcpyHostToDevice));
  }
  if (!fp8)
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
                               {num_pages, kPage, 1, fp8 ? entry : kDqk}, dev);
  if (s.format == KvFormat::fp8_e4m3)
    a.kv.scale = TensorView::make(k_scale.p, DType::f32, {1}, dev);
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
  DeviceBuffer ws(ws_bytes);
  cuda::decode::Kernel kernel = cuda::decode::Kernel::automatic;
  for (cuda::decode::Kernel k : cuda::decode::kKernels)
    if (o.kernel == cuda::decode::kernel_name(k)) kernel = k;
  const BenchTime t = time_events(BenchTiming{o.reps, 5, /*flush_l2=*/true}, [&] {
    if (kernel == cuda::decode::Kernel::automatic)
      BENCH_OK(mla_decode(a, opts, Workspace{ws.p, ws_bytes}, {}));
    else
      BENCH_OK(cuda::mla_decode(a, opts, Workspace{ws.p, ws_bytes}, {}, kernel));
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
  const double peak_flops = o.peaks.bf16_tflops * 1e12, peak_bw = o.peaks.read_gbps * 1e9;
  const double floor_us = std::max(flops / peak_flops, bytes / peak_bw) * 1e6;
  const bool compute_bound = flops / peak_flops > bytes / peak_bw;
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
  j["kernel"] = o.kernel;
  j["time_us"] = t_us;
  j["spread_p10_p90_us"] = spread_us;
  j["tflops"] = flops / (t_us * 1e-6) / 1e12;
  j["gbps"] = bytes / (t_us * 1e-6) / 1e9;
  j["floor_us"] = floor_us;
  j["fraction_of_floor"] = floor_us / t_us;
  j["bound"] = compute_bound ? "compute" : "memory";
  j["workspace_bytes"] = ws_bytes;
  j["flops"] = flops;
  j["bytes"] = bytes;
  // What `mla plan --calibrate` fits: dense decode, the cache format, heads per GPU.
  j["calibration"] = {{"kernel", "decode"},
                      {"format", s.format == KvFormat::bf16 ? "bf16" : "fp8"},
                      {"h_q", s.h_q},
                      {"compute", "bf16"}};
  return j;
}
#endif

// ---- what every suite shares: the ceilings, the JSON document --------------------------

constexpr int kNoGpu = 77;  // as `mla check`: nothing to measure here

// The ceilings, measured (or given), printed; false when there is no GPU to measure on.
bool start_suite(const char* suite, BenchCeilings* peaks, nlohmann::json* doc) {
  std::string how;
  if (!measure_ceilings(peaks, &how)) {
    std::fprintf(stderr, "mla bench %s: %s: nothing to measure\n", suite, how.c_str());
    return false;
  }
  std::printf("ceilings measured on this GPU: %s\n", how.c_str());
  std::fflush(stdout);
  std::string device = "?";
#ifdef MLA_HAS_CUDA
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) device = prop.name;
#endif
  *doc = {{"mla_bench", 1},
          {"suite", suite},
          {"device", device},
          {"gpu", planner_gpu_name(device)},
          {"ceilings",
           {{"read_gbps", peaks->read_gbps},
            {"bf16_tflops", peaks->bf16_tflops},
            {"fp8_tflops", peaks->fp8_tflops},
            {"how", how}}},
          {"results", nlohmann::json::array()}};
  return true;
}

int write_document(const std::string& path, const nlohmann::json& doc) {
  if (path.empty()) return 0;
  std::ofstream f(path);
  f << doc.dump(1) << "\n";
  if (!f) {
    std::fprintf(stderr, "mla bench: cannot write '%s'\n", path.c_str());
    return 1;
  }
  std::printf("wrote %s (%zu rows)\n", path.c_str(), doc["results"].size());
  return 0;
}

int run_decode_bench(BenchOptions o) {
#ifndef MLA_HAS_CUDA
  std::fprintf(stderr, "mla bench decode: no CUDA GPU support in this build: nothing to measure\n");
  return kNoGpu;
#else
  nlohmann::json doc;
  if (!start_suite("decode", &o.peaks, &doc)) return kNoGpu;
  nlohmann::json& results = doc["results"];
  std::printf("%-14s %-22s %-10s %10s %9s %9s %9s %8s %s\n", "suite", "shape", "cache", "time_us",
              "TFLOP/s", "GB/s", "floor_us", "of_floor", "bound");
  for (const Shape& s : suite_shapes(o.suite)) {
    const std::string key = shape_name(s) + " " + kv_format_name(s.format);
    if (!o.only.empty() && std::none_of(o.only.begin(), o.only.end(), [&](const std::string& f) {
          return key.find(f) != std::string::npos;
        }))
      continue;
    nlohmann::json j = bench_shape(s, o);
    std::printf("%-14s %-22s %-10s %10.1f %9.1f %9.0f %9.1f %7.1f%% %s%s%s\n",
                j["suite"].get<std::string>().c_str(), j["name"].get<std::string>().c_str(),
                j["format"].get<std::string>().c_str(), j["time_us"].get<double>(),
                j["tflops"].get<double>(), j["gbps"].get<double>(), j["floor_us"].get<double>(),
                100 * j["fraction_of_floor"].get<double>(), j["bound"].get<std::string>().c_str(),
                o.kernel == "automatic" ? "" : " kernel ",
                o.kernel == "automatic" ? "" : o.kernel.c_str());
    std::fflush(stdout);
    results.push_back(j);
  }
  doc["reps"] = o.reps;
  doc["timing"] = "CUDA events per call, L2 flushed (256 MB memset) before each, 5 warm-up, median";
  return write_document(o.json, doc);
#endif
}

// ---- the suites run by their own programs ---------------------------------------------

// The suite program `name`: beside this binary (a build tree), else in ../libexec/mla
// (an installed tree). "" when neither exists.
std::string suite_program(const char* name) {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  for (const auto& p :
       {self.parent_path() / name, self.parent_path().parent_path() / "libexec" / "mla" / name})
    if (std::filesystem::exists(p, ec)) return p.string();
  return "";
}

// Runs `program args...` and waits for it; its exit status, or 127 when it cannot start.
int run_program(const std::string& program, const std::vector<std::string>& args) {
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(program.c_str()));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    execv(program.c_str(), argv.data());
    std::perror(program.c_str());
    _exit(127);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) < 0) return 127;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f, nullptr, false);
}

struct Scratch {  // a temporary file the suite program writes its rows to
  std::string path;
  Scratch() {
    char tmpl[] = "/tmp/mla-bench-XXXXXX";
    const int fd = mkstemp(tmpl);
    if (fd >= 0) close(fd), path = tmpl;
  }
  ~Scratch() {
    if (!path.empty()) std::remove(path.c_str());
  }
};

// A word of a shape string that starts with `prefix` followed by a number ("h128" -> 128).
int shape_number(const std::string& shape, const std::string& prefix, int fallback) {
  std::istringstream words(shape);
  std::string w;
  while (words >> w)
    if (w.size() > prefix.size() && w.compare(0, prefix.size(), prefix) == 0 &&
        std::isdigit(static_cast<unsigned char>(w[prefix.size()])))
      return std::atoi(w.c_str() + prefix.size());
  return fallback;
}

bool has_word(const std::string& shape, const std::string& word) {
  return (" " + shape + " ").find(" " + word + " ") != std::string::npos;
}

struct DsaFrontOptions {
  std::string json;
  std::string which;  // the case (choices per suite)
  bool calibration = false;
  BenchCeilings peaks;
};

// sparse / indexer / topk: mla_bench_dsa once per case. Its rows (suite, shape, us,
// tflops, gbs, fraction) become the document's rows with time_us, flops and bytes; the
// calibration grid's rows (--calibration: default kernels only) carry the planner's keys.
int run_dsa_suite(const char* suite, const std::vector<std::string>& cases, DsaFrontOptions o) {
  const std::string prog = suite_program("mla_bench_dsa");
  if (prog.empty()) {
    std::fprintf(stderr,
                 "mla bench %s: mla_bench_dsa is not installed beside mla (a build "
                 "with CUDA and MLA_BUILD_TOOLS builds it)\n",
                 suite);
    return kNoGpu;
  }
  nlohmann::json doc;
  if (!start_suite(suite, &o.peaks, &doc)) return kNoGpu;
  for (const std::string& c : cases) {
    Scratch tmp;
    DsaBenchOptions d;
    d.json = tmp.path;
    d.only = c;
    d.peaks = o.peaks;
    if (int rc = run_program(prog, to_args(d)); rc != 0) return rc;
    const nlohmann::json rows = read_json(tmp.path);
    if (!rows.is_array()) {
      std::fprintf(stderr, "mla bench %s: %s wrote no rows\n", suite, prog.c_str());
      return 1;
    }
    for (nlohmann::json r : rows) {
      const std::string s = r.value("suite", ""), shape = r.value("shape", "");
      const double us = r.value("us", 0.0);
      r["case"] = c;
      if (s != "dsa-step") {  // the step rows hold times in every field (their "of" says so)
        r["time_us"] = us;
        r["flops"] = r.value("tflops", 0.0) * us * 1e6;
        r["bytes"] = r.value("gbs", 0.0) * us * 1e3;
      }
      if (c == "stages") {
        if (s == "indexer-decode")
          r["calibration"] = {
              {"kernel", "indexer"}, {"format", "fp8"}, {"h_q", 64}, {"compute", "fp8"}};
        else if (s == "topk")
          r["calibration"] = {
              {"kernel", "topk"}, {"format", "fp32"}, {"h_q", 128}, {"compute", "bf16"}};
        else if (s == "sparse-decode")
          r["calibration"] = {{"kernel", "sparse_decode"},
                              {"format", has_word(shape, "fp8") ? "fp8" : "bf16"},
                              {"h_q", shape_number(shape, "h", 128)},
                              {"compute", "bf16"}};
      }
      doc["results"].push_back(r);
    }
  }
  return write_document(o.json, doc);
}

// prefill / layer: the program writes its own document; it becomes "results" (prefill: its
// rows, the default kernels' attention and decompression rows tagged for the planner;
// layer: its points, which scripts/layer_study_compare.py reads).
// Runs mla_bench_<suite> (installed beside mla) with `o`, its JSON into a scratch file:
// *doc is the suite's document begun (start_suite), *out the program's, holding `key`.
// Returns 0 when both are ready, else the exit code of the command.
template <class Options>
int run_suite_program(const std::string& suite, Options o, BenchCeilings* peaks, const char* key,
                      nlohmann::json* doc, nlohmann::json* out) {
  const std::string name = "mla_bench_" + suite;
  const std::string prog = suite_program(name.c_str());
  if (prog.empty()) {
    std::fprintf(stderr, "mla bench %s: %s is not installed beside mla\n", suite.c_str(),
                 name.c_str());
    return kNoGpu;
  }
  if (!start_suite(suite.c_str(), peaks, doc)) return kNoGpu;
  Scratch tmp;
  o.json = tmp.path;
  if (int rc = run_program(prog, to_args(o)); rc != 0) return rc;
  *out = read_json(tmp.path);
  return out->is_object() && out->contains(key) ? 0 : 1;
}

int run_prefill_suite(PrefillBenchOptions p, const std::string& json, BenchCeilings peaks) {
  nlohmann::json doc, out;
  if (int rc = run_suite_program("prefill", p, &peaks, "results", &doc, &out); rc != 0) return rc;
  const bool default_kernels = !p.attention_only;
  for (nlohmann::json r : out["results"]) {
    const double ms = r.value("ms", 0.0);
    r["time_us"] = ms * 1e3;
    r["flops"] = r.value("tflops", 0.0) * ms * 1e9;
    r["bytes"] = 0.0;  // compute-bound rows: the floor is the FLOPs'
    const std::string s = r.value("suite", "");
    if (default_kernels && (s == "prefill-attention" || s == "prefill-decompress"))
      r["calibration"] = {{"kernel", s == "prefill-attention" ? "prefill" : "decompress"},
                          {"format", "mha"},
                          {"h_q", shape_number(r.value("shape", ""), "h", 128)},
                          {"compute", "bf16"}};
    doc["results"].push_back(r);
  }
  doc["program_ceiling_tflops"] = out.value("ceiling_tflops_measured", 0.0);
  return write_document(json, doc);
}

int run_layer_suite(LayerBenchOptions l, const std::string& json, BenchCeilings peaks) {
  nlohmann::json doc, out;
  if (int rc = run_suite_program("layer", l, &peaks, "points", &doc, &out); rc != 0) return rc;
  doc["results"] = out["points"];
  doc["points"] = out["points"];  // the layer study's own key (scripts/layer_study_compare.py)
  doc["model"] = out.value("model", "");
  return write_document(json, doc);
}

// --json of every bench subcommand.
void json_option(CLI::App* sub, std::string& json) {
  sub->add_option("--json", json,
                  "write the results as JSON to this file (`mla plan --calibrate FILE` "
                  "reads it)");
}

// `mla bench <name>` for a suite that runs its own program: the suite's options, --json
// and the ceilings, then run(options, json, ceilings).
template <class Options>
void add_program_suite(CLI::App* bench, const char* name, const char* help,
                       int (*run)(Options, const std::string&, BenchCeilings)) {
  auto* sub = bench->add_subcommand(name, help);
  auto o = std::make_shared<Options>();
  auto json = std::make_shared<std::string>();
  auto peaks = std::make_shared<BenchCeilings>();
  add_options(*sub, *o);
  json_option(sub, *json);
  add_ceiling_options(*sub, *peaks);
  sub->callback([o, json, peaks, run] { std::exit(run(*o, *json, *peaks)); });
}

}  // namespace

void register_bench_command(CLI::App& app) {
  auto* bench = app.add_subcommand(
      "bench",
      "benchmarks on the GPU (docs/benchmarks.md suites); each measures the ceilings first "
      "and writes JSON that `mla plan --calibrate` reads");
  bench->require_subcommand(1);

  auto* dec = bench->add_subcommand("decode", "dense MLA decode suites (runs in this program)");
  auto o = std::make_shared<BenchOptions>();
  dec->add_option("--suite", o->suite, "decode-128 | decode-tp | decode-varlen | decode-long | all")
      ->check(CLI::IsMember({"decode-128", "decode-tp", "decode-varlen", "decode-long", "all"}))
      ->capture_default_str();
  json_option(dec, o->json);
  dec->add_option("--reps", o->reps, "timed calls per shape (median reported)")
      ->check(CLI::Range(5, 10000))
      ->capture_default_str();
  dec->add_flag("--batch-invariant", o->batch_invariant, "DecodeOptions::batch_invariant");
  std::vector<std::string> kernel_names = {"automatic"};
#ifdef MLA_HAS_CUDA
  kernel_names.clear();
  for (cuda::decode::Kernel k : cuda::decode::kKernels)
    kernel_names.push_back(cuda::decode::kernel_name(k));
#endif
  dec->add_option("--kernel", o->kernel,
                  "the decode kernel to force (a one-way form or a seesaw kernel); automatic: "
                  "the public mla_decode's choice")
      ->check(CLI::IsMember(kernel_names))
      ->capture_default_str();
  dec->add_option("--only", o->only,
                  "run only the shapes whose \"<name> <format>\" contains one of these "
                  "(e.g. \"b128 h128 s_q1 L32K bf16\"; repeatable)");
  add_ceiling_options(*dec, o->peaks);
  dec->callback([o] { std::exit(run_decode_bench(*o)); });

  struct DsaSuite {
    const char* name;
    const char* help;
    std::vector<std::string> cases;  // the first is the default; "all" runs every one
  };
  const DsaSuite dsa_suites[] = {
      {"sparse",
       "sparse attention: decode (FlashMLA's shapes) and prefill (s_q 4096)",
       {"sparse-decode", "sparse-prefill"}},
      {"indexer", "the lightning indexer's logits (decode and prefill)", {"indexer"}},
      {"topk",
       "top-k over indexer logits; topk-sweep: the DSA step against k at 128K",
       {"topk", "topk-sweep"}},
  };
  for (const DsaSuite& s : dsa_suites) {
    auto* sub = bench->add_subcommand(s.name, std::string(s.help) + " (runs mla_bench_dsa)");
    auto d = std::make_shared<DsaFrontOptions>();
    std::vector<std::string> choices = s.cases;
    choices.push_back("all");
    std::string names;
    for (const std::string& c : choices) names += (names.empty() ? "" : " | ") + c;
    d->which = s.cases[0];
    sub->add_option("--case", d->which, names)
        ->check(CLI::IsMember(choices))
        ->capture_default_str();
    sub->add_flag("--calibration", d->calibration,
                  "instead: the planner's calibration grid of the three DSA stages (indexer, "
                  "top-k, sparse decode; B 4/16/64 x L 8K/32K/128K, default kernels), rows "
                  "tagged for `mla plan --calibrate`");
    json_option(sub, d->json);
    add_ceiling_options(*sub, d->peaks);
    const std::string name = s.name;
    const std::vector<std::string> all = s.cases;
    sub->callback([d, name, all] {
      std::vector<std::string> cases = d->which == "all" ? all : std::vector{d->which};
      if (d->calibration) cases = {"stages"};
      std::exit(run_dsa_suite(name.c_str(), cases, *d));
    });
  }

  add_program_suite<PrefillBenchOptions>(
      bench, "prefill", "prefill attention and the decompression GEMMs (runs mla_bench_prefill)",
      run_prefill_suite);
  add_program_suite<LayerBenchOptions>(
      bench, "layer", "one DeepSeek-V3.2 attention layer's decode loop (runs mla_bench_layer)",
      run_layer_suite);
}

}  // namespace mla::cli
