// `mla plan`: the planner (src/plan). Prints a table, or JSON
// with --json; --seed-check recomputes the seed documents' tables; --calibrate FILE
// predicts times from measured kernel efficiencies instead of the datasheet (FILE: a
// calibration of docs/planner.md, or what `mla bench --json` wrote: fitted here).
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "bench_calibration.hpp"
#include "cli_checks.hpp"
#include "commands.hpp"
#include "mla/plan.hpp"

namespace mla::cli {
namespace {

struct PlanOptions {
  plan::Workload w;
  std::string phase = "decode";
  std::string kv = "bf16";
  std::string weights = "released";
  std::string calibrate;
  bool json = false;
  bool seed_check = false;
  bool list = false;
};

[[noreturn]] void fail(const Status& st) {
  std::cerr << "mla plan: " << st.message() << "\n";
  std::exit(2);
}

// A calibration file, or a benchmark's JSON that the fit turns into one.
Status load_any_calibration(const std::string& path, const std::string& gpu,
                            plan::Calibration* cal) {
  std::ifstream f(path);
  if (!f) return Status(Errc::invalid_value, "--calibrate: cannot open '" + path + "'");
  std::stringstream ss;
  ss << f.rdbuf();
  const nlohmann::json doc = nlohmann::json::parse(ss.str(), nullptr, false);
  if (!is_bench_document(doc)) return plan::load_calibration(path, cal);
  const plan::GpuSpec* g = nullptr;
  if (Status st = plan::find_gpu(gpu, &g); !st.ok()) return st;
  std::string summary;
  Status st = calibration_from_bench(doc, *g, cal, &summary);
  if (!st.ok()) return Status(st.code(), st.message() + " (" + path + ")");
  std::cerr << "mla plan: calibration fitted from " << path << ":\n" << summary;
  return Status::Ok();
}

int run(const PlanOptions& o) {
  if (o.list && o.json) {
    nlohmann::json j = {{"gpus", nlohmann::json::array()}, {"models", nlohmann::json::array()}};
    for (const plan::GpuSpec& g : plan::known_gpus())
      j["gpus"].push_back({{"name", g.name}, {"full_name", g.full_name}, {"source", g.source}});
    for (const plan::ModelSpec& m : plan::known_models())
      j["models"].push_back({{"name", m.name}, {"full_name", m.full_name}, {"source", m.source}});
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  if (o.list) {
    std::cout << "gpus:\n";
    for (const plan::GpuSpec& g : plan::known_gpus())
      std::cout << "  " << g.name << "  " << g.full_name << "  (" << g.source << ")\n";
    std::cout << "models:\n";
    for (const plan::ModelSpec& m : plan::known_models())
      std::cout << "  " << m.name << "  " << m.full_name << "  (" << m.source << ")\n";
    return 0;
  }
  if (o.seed_check) {
    const auto rows = plan::seed_check();
    std::cout << (o.json ? plan::render_seed_check_json(rows) + "\n"
                         : plan::render_seed_check_text(rows));
    return 0;
  }
  plan::Workload w = o.w;
  if (Status st = plan::parse_phase(o.phase, &w.phase); !st.ok()) fail(st);
  if (Status st = plan::parse_kv_precision(o.kv, &w.kv); !st.ok()) fail(st);
  if (Status st = plan::parse_weight_precision(o.weights, &w.weights); !st.ok()) fail(st);
  plan::Calibration cal;
  const bool calibrated = !o.calibrate.empty();
  if (calibrated)
    if (Status st = load_any_calibration(o.calibrate, w.gpu, &cal); !st.ok()) fail(st);
  plan::Plan p;
  if (Status st = plan::make_plan(w, calibrated ? &cal : nullptr, &p); !st.ok()) fail(st);
  std::cout << (o.json ? plan::render_json(p) + "\n" : plan::render_text(p));
  return 0;
}

}  // namespace

void register_plan_command(CLI::App& app) {
  auto o = std::make_shared<PlanOptions>();
  auto* sub = app.add_subcommand(
      "plan", "KV sizes, capacity, roofline and the recommended MLA/DSA configuration");
  constexpr int64_t kIntMin = std::numeric_limits<int>::min();
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  // The workload's options: --list and --seed-check ignore them, so they refuse them.
  std::vector<CLI::Option*> workload = {
      sub->add_option("--model", o->w.model,
                      "deepseek-v3, deepseek-v3.2, deepseek-v2-lite, seed004-64l, llama-3.1-405b")
          ->capture_default_str(),
      sub->add_option("--gpu", o->w.gpu, "h100, h800, h200, h20, b200, b300")
          ->capture_default_str(),
      sub->add_option("--phase", o->phase, "decode or prefill")->capture_default_str(),
      sub->add_option("--batch", o->w.batch,
                      "requests per GPU in the step; 0 = the largest that fits with --kv")
          ->check(decimal_integer())
          ->capture_default_str(),
      sub->add_option("--context", o->w.context, "cached tokens per request")
          ->check(decimal_integer())
          ->capture_default_str(),
      sub->add_option("--new-tokens", o->w.new_tokens,
                      "new tokens per request per decode step (2-4: speculative decoding)")
          ->check(decimal_integer(kIntMin, kIntMax))
          ->capture_default_str(),
      sub->add_option("--kv", o->kv, "KV cache precision: bf16, fp8, fp4 (fp4 is on paper)")
          ->capture_default_str(),
      sub->add_option("--weights", o->weights,
                      "attention-layer projection weights: released (the model's own), bf16, fp8")
          ->capture_default_str(),
      sub->add_option("--tp", o->w.tp,
                      "attention tensor parallel size (heads per GPU = heads / tp)")
          ->check(decimal_integer(kIntMin, kIntMax))
          ->capture_default_str(),
      sub->add_option("--weight-shards", o->w.weight_shards,
                      "GPUs the weights are spread over (expert/tensor parallel)")
          ->check(decimal_integer(kIntMin, kIntMax))
          ->capture_default_str(),
      sub->add_option("--topk", o->w.topk, "DSA top-k")
          ->check(decimal_integer(kIntMin, kIntMax))
          ->capture_default_str(),
      sub->add_option("--mem-util", o->w.mem_util, "fraction of HBM the engine may use")
          ->check(finite_number())
          ->capture_default_str(),
      sub->add_option("--calibrate", o->calibrate,
                      "measured kernel efficiencies: a calibration JSON (docs/planner.md) or "
                      "what `mla bench <suite> --json` wrote (fitted here)")};
  sub->add_flag("--json", o->json, "print JSON instead of the table");
  auto* seed = sub->add_flag("--seed-check", o->seed_check,
                             "recompute the seed documents' tables and judge them row by row");
  auto* list =
      sub->add_flag("--list", o->list, "list the known GPUs and models with their sources");
  for (CLI::Option* w : workload) {
    seed->excludes(w);
    list->excludes(w);
  }
  list->excludes(seed);
  sub->callback([o] { std::exit(run(*o)); });
}

}  // namespace mla::cli
