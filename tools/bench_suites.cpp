#include <cstdio>
#include <cstdlib>

#include "bench_suites_cli.hpp"
#include "cli_checks.hpp"

namespace mla::cli {
namespace {

void parse_or_exit(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e));
  }
}

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

void push_ceilings(std::vector<std::string>& a, const BenchCeilings& c) {
  if (c.read_gbps > 0) a.insert(a.end(), {"--peak-gbps", num(c.read_gbps)});
  if (c.bf16_tflops > 0) a.insert(a.end(), {"--peak-tflops", num(c.bf16_tflops)});
  if (c.fp8_tflops > 0) a.insert(a.end(), {"--peak-fp8-tflops", num(c.fp8_tflops)});
}

}  // namespace

void add_ceiling_options(CLI::App& app, BenchCeilings& c) {
  app.add_option("--peak-gbps", c.read_gbps,
                 "HBM bandwidth ceiling in GB/s (default: measured at the start)")
      ->check(CLI::PositiveNumber);
  app.add_option("--peak-tflops", c.bf16_tflops,
                 "bf16 tensor-core ceiling in TFLOP/s (default: measured at the start)")
      ->check(CLI::PositiveNumber);
  app.add_option("--peak-fp8-tflops", c.fp8_tflops,
                 "fp8 tensor-core ceiling in TFLOP/s (default: 2 x the bf16 ceiling)")
      ->check(CLI::PositiveNumber);
}

void add_options(CLI::App& app, PrefillBenchOptions& o) {
  app.add_flag("--quick", o.quick, "8K only (the full suite: 8K, 16K, 32K)");
  app.add_flag("--crossover", o.crossover, "only the absorbed vs non-absorbed sweep");
  app.add_flag("--attention-only", o.attention_only,
               "attention alone at 8K/16K/32K, every prefill kernel in the same run");
}

void add_options(CLI::App& app, LayerBenchOptions& o) {
  app.add_option("--reps", o.reps, "timed steps per point (median reported)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--contexts", o.contexts, "comma-separated contexts (tokens per request)")
      ->capture_default_str();
  app.add_option("--configs", o.configs,
                 "comma-separated: mla-bf16, mla-fp8, mla-bf16+dsa, mla-fp8+dsa")
      ->capture_default_str();
  app.add_option("--batch", o.batch,
                 "requests per step; 0 = the planner's largest batch for each cache")
      ->check(decimal_integer(0, 1 << 20))
      ->capture_default_str();
}

DsaBenchOptions parse_dsa_bench(int argc, char** argv) {
  DsaBenchOptions o;
  CLI::App app{
      "mla_bench_dsa: the DSA suites (indexer, top-k, sparse attention, the DSA step) on the "
      "GPU; `mla bench sparse|indexer|topk` runs it"};
  app.add_option("--json,json", o.json, "write the rows as JSON to this file")
      ->capture_default_str();
  app.add_option(
         "--suite,suite", o.only,
         "indexer, topk, topk-sweep, sparse-decode, sparse-prefill, dsa-vs-dense, "
         "dsa-step, stages (the planner's calibration grid), all; diagnostics: "
         "topk-probe, topk-read, topk-short, topk-one R N [k], indexer-prefill, prefill-select")
      ->check(CLI::IsMember({"indexer", "topk", "topk-sweep", "sparse-decode", "sparse-prefill",
                             "dsa-vs-dense", "dsa-step", "stages", "all", "topk-probe", "topk-read",
                             "topk-short", "topk-one", "indexer-prefill", "prefill-select"}))
      ->capture_default_str();
  app.add_option("shape", o.shape, "topk-one: R N [k], after the file and the suite");
  add_ceiling_options(app, o.peaks);
  parse_or_exit(app, argc, argv);
  return o;
}

template <class Options>
Options parse_bench(int argc, char** argv) {
  Options o;
  CLI::App app{Options::kDescription};
  app.add_option("--json", o.json, Options::kJsonHelp);
  add_options(app, o);
  parse_or_exit(app, argc, argv);
  return o;
}
template PrefillBenchOptions parse_bench<PrefillBenchOptions>(int, char**);
template LayerBenchOptions parse_bench<LayerBenchOptions>(int, char**);

std::vector<std::string> to_args(const DsaBenchOptions& o) {
  std::vector<std::string> a = {"--json", o.json, "--suite", o.only};
  push_ceilings(a, o.peaks);
  return a;
}

std::vector<std::string> to_args(const PrefillBenchOptions& o) {
  std::vector<std::string> a;
  if (!o.json.empty()) a.insert(a.end(), {"--json", o.json});
  if (o.quick) a.push_back("--quick");
  if (o.crossover) a.push_back("--crossover");
  if (o.attention_only) a.push_back("--attention-only");
  return a;
}

std::vector<std::string> to_args(const LayerBenchOptions& o) {
  std::vector<std::string> a;
  if (!o.json.empty()) a.insert(a.end(), {"--json", o.json});
  a.insert(a.end(), {"--reps", std::to_string(o.reps), "--contexts", o.contexts, "--configs",
                     o.configs, "--batch", std::to_string(o.batch)});
  return a;
}

}  // namespace mla::cli
