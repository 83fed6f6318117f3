// Rendering a Plan: a readable table, and JSON with the same numbers.
#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "plan/internal.hpp"
#include "plan/spec_json.hpp"

namespace mla::plan {
namespace detail {

std::string fmt_int(int64_t v) {
  std::string s = std::to_string(v < 0 ? -v : v), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return v < 0 ? "-" + out : out;
}

std::string fmt_bytes(double b) {
  const double a = std::fabs(b);
  if (a >= 1e12) return fmt::format("{:.2f} TB", b / 1e12);
  if (a >= 1e9) return fmt::format("{:.2f} GB", b / 1e9);
  if (a >= 1e6) return fmt::format("{:.2f} MB", b / 1e6);
  if (a >= 1e4) return fmt::format("{:.1f} KB", b / 1e3);
  return fmt::format("{:.0f} B", b);
}

std::string fmt_time(double s) {
  if (s >= 1) return fmt::format("{:.2f} s", s);
  if (s >= 1e-3) return fmt::format("{:.2f} ms", s * 1e3);
  return fmt::format("{:.1f} us", s * 1e6);
}

std::string fmt_flops(double f) {
  if (f >= 1e15) return fmt::format("{:.2f} PFLOP", f / 1e15);
  if (f >= 1e12) return fmt::format("{:.2f} TFLOP", f / 1e12);
  if (f >= 1e9) return fmt::format("{:.2f} GFLOP", f / 1e9);
  return fmt::format("{:.0f} FLOP", f);
}

}  // namespace detail

using detail::fmt_bytes;
using detail::fmt_flops;
using detail::fmt_int;
using detail::fmt_time;

std::string render_text(const Plan& p) {
  const Workload& w = p.workload;
  const ModelSpec& m = *p.model;
  const GpuSpec& g = *p.gpu;
  std::string o;
  auto line = [&](std::string s) { o += s + "\n"; };
  const bool decode = w.phase == Phase::decode;
  line(fmt::format("mla plan: {} on {}", m.full_name, g.full_name));
  line(fmt::format(
      "workload: {}, batch {}{}, context {}, {} new token(s)/request, kv {}, tp {} ({} "
      "heads/GPU), top-k {}",
      phase_name(w.phase), w.batch, p.batch_auto ? " (auto: the largest that fits with --kv)" : "",
      fmt_int(w.context), w.new_tokens, kv_precision_name(w.kv), w.tp, p.heads_per_gpu, w.topk));
  line(fmt::format("ceilings: {}; ridge bf16 {:.0f} FLOP/B, fp8 {:.0f} FLOP/B", p.ceilings.source,
                   p.ridge_bf16, p.ridge_fp8));
  line(fmt::format(
      "weights: {:.1f}B params x {} B/param, {} / {} shards = {} per GPU; HBM {} x {:.2f} "
      "= {} usable -> {} for KV",
      m.params / 1e9, m.weight_bytes_per_param, m.weight_precision, w.weight_shards,
      fmt_bytes(p.weights_bytes_per_gpu), fmt_bytes(g.hbm_bytes), w.mem_util,
      fmt_bytes(p.usable_hbm_bytes), fmt_bytes(std::max(0.0, p.free_bytes))));
  line("");
  line(fmt::format("KV cache per GPU ({} layers; MLA's latent is replicated over TP ranks)",
                   m.layers));
  line(fmt::format("  {:<16}{:>12}{:>10}{:>12}{:>12}{:>11}  {}", "format", "B/tok/layer",
                   "+indexer", "KV/token", "KV/request", "max batch", "note"));
  for (const FormatPlan& f : p.formats)
    line(fmt::format(
        "  {:<16}{:>12}{:>10}{:>12}{:>12}{:>11}  {}", f.name,
        fmt_int(f.cache_bytes_per_token_layer),
        f.indexer_bytes_per_token_layer ? fmt_int(f.indexer_bytes_per_token_layer) : "-",
        fmt_int(f.kv_bytes_per_token), fmt_bytes(f.kv_bytes_per_request), fmt_int(f.max_batch),
        f.note));
  line("");
  line(decode ? fmt::format("Decode step: {} request(s) x {} new token(s), attention only, all {} "
                            "layers",
                            w.batch, w.new_tokens, m.layers)
              : fmt::format("Prefill: one request's {}-token prompt, causal, attention only, all "
                            "{} layers",
                            fmt_int(w.context), m.layers));
  line(fmt::format("  {:<16}{:>14}{:>12}{:>9}{:>11}{:>9}{:>12}  {}", "format", "FLOPs", "bytes",
                   "FLOP/B", "floor", "binds", "predicted", "stages (floor, bound)"));
  for (const FormatPlan& f : p.formats) {
    std::string stages;
    if (f.step.stages.size() > 1)
      for (const StageCost& s : f.step.stages)
        stages += fmt::format("{}{} {} {}", stages.empty() ? "" : "; ", s.name, fmt_time(s.floor_s),
                              s.binds);
    line(fmt::format("  {:<16}{:>14}{:>12}{:>9.1f}{:>11}{:>9}{:>12}  {}", f.name,
                     fmt_flops(f.step.flops), fmt_bytes(f.step.bytes), f.step.intensity,
                     fmt_time(f.step.floor_s), f.step.binds, fmt_time(f.step.predicted_s), stages));
  }
  line(p.calibrated ? fmt::format("  predicted: floor / measured fraction of the ceiling ({})",
                                  p.calibration_source)
                    : "  predicted = floor: no calibration given (--calibrate FILE from `mla "
                      "bench`)");
  line("");
  line(fmt::format(
      "Layer view: attention + the attention layer's projections ({} weights{}), "
      "per layer and x {} layers",
      weight_precision_name(w.weights), p.weights_auto ? ", as released" : "", m.layers));
  line(fmt::format("  {:<16}{:>12}{:>12}{:>12}{:>12}{:>9}{:>12}{:>12}{:>11}", "format",
                   "weights/lyr", "proj/layer", "attn/layer", "layer", "proj is", "x layers",
                   "predicted", "proj share"));
  for (const FormatPlan& f : p.formats) {
    const StageCost& proj = f.layer.stages.back();
    const double n = m.layers;
    line(fmt::format("  {:<16}{:>12}{:>12}{:>12}{:>12}{:>9}{:>12}{:>12}{:>10.0f}%", f.name,
                     fmt_bytes(f.projections.weight_bytes), fmt_time(proj.floor_s / n),
                     fmt_time(f.step.floor_s / n), fmt_time(f.layer.floor_s / n), proj.binds,
                     fmt_time(f.layer.floor_s), fmt_time(f.layer.predicted_s),
                     100 * proj.floor_s / f.layer.floor_s));
  }
  line("  (proj = the projections stage's floor; MoE/MLP and communication not included)");
  line("");
  line("Recommended configuration");
  for (const Recommendation& r : p.recommendations)
    line(fmt::format("  {:<15} {}\n  {:<15}   why: {}", r.item, r.choice, "", r.reason));
  line("");
  line("Notes");
  for (const std::string& n : p.notes) line("  - " + n);
  return o;
}

// A stage as JSON: every field under its own name (to_json, found by nlohmann::json).
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(StageCost, name, calib_kernel, calib_format, compute_ceiling,
                                   flops, bytes, compute_s, memory_s, floor_s, binds, predicted_s,
                                   fraction_used, calls, overhead_s, predicted_from)

namespace {

// A step's totals (JSON objects keep their keys sorted: callers add theirs in any order).
nlohmann::json totals_json(const StepCost& c) {
  return {{"flops", c.flops},
          {"bytes", c.bytes},
          {"intensity", c.intensity},
          {"floor_s", c.floor_s},
          {"predicted_s", c.predicted_s},
          {"binds", c.binds}};
}

}  // namespace

std::string render_json(const Plan& p) {
  using nlohmann::json;
  const Workload& w = p.workload;
  const ModelSpec& m = *p.model;
  const GpuSpec& g = *p.gpu;
  json j;
  j["workload"] = {{"model", m.name},
                   {"gpu", g.name},
                   {"phase", phase_name(w.phase)},
                   {"batch", w.batch},
                   {"batch_auto", p.batch_auto},
                   {"context", w.context},
                   {"new_tokens", w.new_tokens},
                   {"kv", kv_precision_name(w.kv)},
                   {"tp", w.tp},
                   {"weight_shards", w.weight_shards},
                   {"topk", w.topk},
                   {"mem_util", w.mem_util},
                   {"weights", weight_precision_name(w.weights)},
                   {"weights_auto", p.weights_auto}};
  j["gpu"] = gpu_json(g);
  j["model"] = model_json(m);
  auto tag = [](bool measured) { return measured ? "measured" : "datasheet"; };
  j["ceilings"] = {{"read_bw", p.ceilings.read_bw},
                   {"read_bw_from", tag(p.ceilings.read_bw_measured)},
                   {"bf16_flops", p.ceilings.bf16_flops},
                   {"bf16_from", tag(p.ceilings.bf16_measured)},
                   {"fp8_flops", p.ceilings.fp8_flops},
                   {"fp8_from", tag(p.ceilings.fp8_measured)},
                   {"fp4_flops", p.ceilings.fp4_flops},
                   {"ridge_bf16", p.ridge_bf16},
                   {"ridge_fp8", p.ridge_fp8},
                   {"source", p.ceilings.source}};
  j["capacity"] = {{"heads_per_gpu", p.heads_per_gpu},
                   {"weights_bytes_per_gpu", p.weights_bytes_per_gpu},
                   {"usable_hbm_bytes", p.usable_hbm_bytes},
                   {"free_bytes", p.free_bytes},
                   {"min_weight_shards", p.min_weight_shards}};
  j["formats"] = json::array();
  for (const FormatPlan& f : p.formats) {
    json step = totals_json(f.step);
    step["stages"] = f.step.stages;
    json layer_step = totals_json(f.layer);
    layer_step["per_layer_floor_s"] = f.layer.floor_s / m.layers;
    layer_step["per_layer_predicted_s"] = f.layer.predicted_s / m.layers;
    layer_step["projections_share_of_floor"] = f.layer.stages.back().floor_s / f.layer.floor_s;
    j["formats"].push_back(
        {{"name", f.name},
         {"format", kv_format_name(f.format)},
         {"dsa", f.dsa},
         {"native", f.native},
         {"on_paper", f.on_paper},
         {"note", f.note},
         {"cache_bytes_per_token_layer", f.cache_bytes_per_token_layer},
         {"indexer_bytes_per_token_layer", f.indexer_bytes_per_token_layer},
         {"kv_bytes_per_token", f.kv_bytes_per_token},
         {"kv_bytes_per_request", f.kv_bytes_per_request},
         {"max_batch", f.max_batch},
         {"batch_fits", f.batch_fits},
         {"step", step},
         {"projections",
          {{"params_per_layer", f.projections.params},
           {"weight_bytes_per_layer", f.projections.weight_bytes},
           {"flops_per_token_per_layer", f.projections.flops_per_token},
           {"activation_bytes_per_token_per_layer", f.projections.activation_bytes_per_token},
           {"precision", f.projections.fp8 ? "fp8" : "bf16"},
           {"stage", f.layer.stages.back()}}},
         {"layer_step", layer_step}});
  }
  j["recommendations"] = json::array();
  for (const Recommendation& r : p.recommendations)
    j["recommendations"].push_back({{"item", r.item}, {"choice", r.choice}, {"reason", r.reason}});
  j["notes"] = p.notes;
  j["calibrated"] = p.calibrated;
  j["calibration_source"] = p.calibration_source;
  return j.dump(2);
}

}  // namespace mla::plan
