// make_plan: validates the workload, prices every KV format for it, and asks
// recommend() for the configuration.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "plan/internal.hpp"
#include "plan/lookup.hpp"

namespace mla::plan {

namespace {
constexpr detail::EnumName<KvPrecision> kKvPrecisions[] = {
    {KvPrecision::bf16, "bf16"}, {KvPrecision::fp8, "fp8"}, {KvPrecision::fp4, "fp4"}};
constexpr detail::EnumName<Phase> kPhases[] = {{Phase::decode, "decode"},
                                               {Phase::prefill, "prefill"}};
}  // namespace

const char* kv_precision_name(KvPrecision p) {
  return detail::enum_name(kKvPrecisions, p);
}

Status parse_kv_precision(std::string_view name, KvPrecision* out) {
  return detail::parse_enum(kKvPrecisions, name, "kv", "kv precisions", out);
}

const char* phase_name(Phase p) {
  return detail::enum_name(kPhases, p);
}

Status parse_phase(std::string_view name, Phase* out) {
  return detail::parse_enum(kPhases, name, "phase", "phases", out);
}

namespace {

Status validate(const Workload& w, const ModelSpec& m) {
  auto bad = [](std::string msg) { return Status(Errc::invalid_value, std::move(msg)); };
  if (w.batch < 0) return bad(fmt::format("batch = {} must be >= 1 (or 0: auto)", w.batch));
  if (w.context < 1) return bad(fmt::format("context = {} must be >= 1", w.context));
  if (w.context > (int64_t{1} << 24))
    return bad(fmt::format("context = {} is past the planner's limit of 16M tokens", w.context));
  if (w.new_tokens < 1 || w.new_tokens > 64)
    return bad(fmt::format("new_tokens = {} must be in [1, 64]", w.new_tokens));
  if (w.tp < 1 || m.heads % w.tp != 0)
    return bad(fmt::format("tp = {} must be >= 1 and divide {}'s {} heads", w.tp, m.name, m.heads));
  if (w.weight_shards < 1)
    return bad(fmt::format("weight_shards = {} must be >= 1", w.weight_shards));
  if (w.topk < 1) return bad(fmt::format("topk = {} must be >= 1", w.topk));
  if (!(w.mem_util > 0 && w.mem_util <= 1))
    return bad(fmt::format("mem_util = {} must be in (0, 1]", w.mem_util));
  if (m.native == AttentionKind::gqa && w.kv != KvPrecision::bf16)
    return Status(Errc::unsupported,
                  fmt::format("kv = {}: the planner prices {}'s GQA cache in bf16 only",
                              kv_precision_name(w.kv), m.name));
  return Status::Ok();
}

KvFormat mla_format(KvPrecision p) {
  switch (p) {
    case KvPrecision::bf16: return KvFormat::mla_bf16;
    case KvPrecision::fp8: return KvFormat::mla_fp8;
    case KvPrecision::fp4: return KvFormat::mla_fp4;
  }
  return KvFormat::mla_bf16;
}

}  // namespace

Status make_plan(const Workload& w, const Calibration* cal, Plan* out) {
  const ModelSpec* m = nullptr;
  const GpuSpec* g = nullptr;
  MLA_TRY(find_model(w.model, &m));
  MLA_TRY(find_gpu(w.gpu, &g));
  MLA_TRY(validate(w, *m));
  if (cal != nullptr && !detail::iequals(cal->gpu, g->name))
    return Status(
        Errc::invalid_value,
        fmt::format("calibration gpu '{}' does not match the plan's gpu '{}'", cal->gpu, g->name));

  Plan p;
  p.workload = w;
  p.gpu = g;
  p.model = m;
  p.ceilings = ceilings_for(*g);
  p.heads_per_gpu = m->heads / w.tp;
  const double weights_total = m->params * m->weight_bytes_per_param;
  p.weights_bytes_per_gpu = weights_total / w.weight_shards;
  p.usable_hbm_bytes = g->hbm_bytes * w.mem_util;
  p.free_bytes = p.usable_hbm_bytes - p.weights_bytes_per_gpu;
  // A double past int's range cannot be cast (the old cast gave -2147483647
  // for a tiny mem_util): more shards than any deployment has is an error.
  const double min_shards = std::floor(weights_total / p.usable_hbm_bytes) + 1;
  if (!(min_shards <= 1e6))
    return Status(Errc::invalid_value,
                  fmt::format("mem_util = {} leaves {:.3g} bytes of {}'s HBM usable: the weights "
                              "({:.3g} bytes) would need {:.3g} shards",
                              w.mem_util, p.usable_hbm_bytes, g->name, weights_total, min_shards));
  p.min_weight_shards = static_cast<int>(min_shards);
  p.ridge_bf16 = p.ceilings.bf16_flops / p.ceilings.read_bw;
  p.ridge_fp8 = p.ceilings.fp8_flops / p.ceilings.read_bw;
  p.calibrated = cal != nullptr;
  p.weights_auto = w.weights == WeightPrecision::released;
  if (p.weights_auto)
    p.workload.weights =
        detail::released_weights_fp8(*m) ? WeightPrecision::fp8 : WeightPrecision::bf16;
  const bool weights_fp8 = p.workload.weights == WeightPrecision::fp8;
  if (w.batch == 0) {
    // Auto: the largest batch the asked format fits (the MLA row the model runs; GQA: bf16).
    const KvFormat f = m->native == AttentionKind::gqa ? KvFormat::gqa_bf16 : mla_format(w.kv);
    const int64_t idx = m->native == AttentionKind::mla ? m->indexer_bytes_per_token : 0;
    const double per_request = double(m->layers) *
                               (detail::local_cache_bytes_per_token_layer(*m, f, w.tp) + idx) *
                               double(w.context);
    p.batch_auto = true;
    p.workload.batch = p.free_bytes > 0
                           ? std::max<int64_t>(1, int64_t(std::floor(p.free_bytes / per_request)))
                           : 1;
  }
  const Workload& wr = p.workload;  // the workload with its batch resolved
  if (cal != nullptr) p.calibration_source = cal->source;

  detail::StepShape shape{wr.batch, w.context, w.new_tokens, p.heads_per_gpu, w.tp, w.topk, false};
  if (w.phase == Phase::prefill) shape = {1, w.context, 1, p.heads_per_gpu, w.tp, w.topk, true};

  auto add = [&](std::string name, KvFormat f, bool dsa, bool native, bool on_paper,
                 std::string note) {
    FormatPlan fp;
    fp.name = std::move(name);
    fp.format = f;
    fp.dsa = dsa;
    fp.native = native;
    fp.on_paper = on_paper;
    fp.note = std::move(note);
    fp.cache_bytes_per_token_layer = kv_bytes_per_token_layer(*m, f);
    const bool mla_row =
        f == KvFormat::mla_bf16 || f == KvFormat::mla_fp8 || f == KvFormat::mla_fp4;
    fp.indexer_bytes_per_token_layer = mla_row ? m->indexer_bytes_per_token : 0;
    fp.kv_bytes_per_token =
        int64_t{m->layers} *
        (detail::local_cache_bytes_per_token_layer(*m, f, w.tp) + fp.indexer_bytes_per_token_layer);
    fp.kv_bytes_per_request = static_cast<double>(fp.kv_bytes_per_token) * w.context;
    fp.max_batch = p.free_bytes > 0
                       ? static_cast<int64_t>(std::floor(p.free_bytes / fp.kv_bytes_per_request))
                       : 0;
    fp.batch_fits = fp.max_batch >= shape.batch;
    fp.step = detail::step_cost(*m, f, dsa, shape, p.ceilings, cal);
    // The layer view: the attention layer's projections beside the attention stages.
    // The indexer scores (its query projections run) only where the step is sparse; the
    // non-absorbed prefill prices W_UK/W_UV per key in its decompression stage instead.
    const bool sparse = dsa && m->indexer_heads > 0 && w.context > w.topk;
    const bool per_token_absorb = !(w.phase == Phase::prefill && mla_row && !sparse);
    fp.projections =
        layer_projections(*m, f, p.heads_per_gpu, weights_fp8, sparse, per_token_absorb);
    const double tokens = double(shape.batch) * shape.new_tokens *
                          (w.phase == Phase::prefill ? double(w.context) : 1.0);
    fp.layer =
        detail::layer_step(fp.step, detail::projections_stage(fp.projections, tokens, m->layers,
                                                              p.ceilings, cal, p.heads_per_gpu));
    p.formats.push_back(std::move(fp));
  };

  const bool blackwell = std::string_view(g->arch) == "blackwell";
  const std::string fp4_note = blackwell ? "on paper: no kernel yet; Blackwell has FP4 tensor cores"
                                         : "on paper: no kernel; Hopper has no FP4 tensor cores";
  if (m->native == AttentionKind::gqa) {
    add("mha-bf16", KvFormat::mha_bf16, false, false, false,
        fmt::format("contrast: every head caches K and V ({} x {})", m->heads, m->head_dim_k));
    add(fmt::format("gqa-{}-bf16", m->gqa_kv_heads), KvFormat::gqa_bf16, false, true, false,
        "the model's own cache");
  } else {
    add("mha-bf16", KvFormat::mha_bf16, false, false, false,
        fmt::format("contrast: decompressed K ({}) and V ({}) of every head cached", m->head_dim_k,
                    m->head_dim_v));
    if (m->gqa_kv_heads > 0)
      add(fmt::format("gqa-{}-bf16", m->gqa_kv_heads), KvFormat::gqa_bf16, false, false, false,
          "contrast: the seed's GQA form");
    const bool has_dsa = m->indexer_heads > 0;
    for (KvFormat f : {KvFormat::mla_bf16, KvFormat::mla_fp8, KvFormat::mla_fp4}) {
      const bool paper = f == KvFormat::mla_fp4;
      const std::string base = kv_format_name(f);
      if (has_dsa) {
        add(base, f, false, false, paper,
            paper ? fp4_note
                  : fmt::format("contrast: dense over all keys (V3.2's function only while "
                                "context <= top-k {})",
                                w.topk));
        add(base + "+dsa", f, true, true, paper,
            paper ? fp4_note : std::string("indexer + top-k + sparse attention"));
      } else {
        add(base, f, false, true, paper, paper ? fp4_note : std::string());
      }
    }
  }

  if (p.free_bytes <= 0)
    p.notes.push_back(fmt::format(
        "weights ({} per GPU over {} shards) do not fit in {} x {:.2f} usable: spread them over "
        ">= {} GPUs (--weight-shards)",
        detail::fmt_bytes(p.weights_bytes_per_gpu), w.weight_shards,
        detail::fmt_bytes(g->hbm_bytes), w.mem_util, p.min_weight_shards));
  if (w.phase == Phase::prefill)
    p.notes.push_back(
        "prefill: the step is one request's whole prompt (batch 1), causal; --batch only sizes "
        "the capacity check");
  p.notes.push_back(
      "step costs are attention only (this library's part); the layer view adds the attention "
      "layer's projections; MoE/MLP GEMMs and communication are in neither");
  p.notes.push_back(fmt::format("ceilings: {}", p.ceilings.source));

  p.recommendations = detail::recommend(p, cal);
  // The format asked for is priced like the others; say if it does not fit.
  if (m->native == AttentionKind::mla) {
    for (const FormatPlan& fp : p.formats) {
      if (fp.format == mla_format(w.kv) && fp.native && !fp.batch_fits && p.free_bytes > 0)
        p.notes.push_back(fmt::format("batch {} does not fit with {}: at most {} requests",
                                      wr.batch, fp.name, fp.max_batch));
    }
  }
  *out = std::move(p);
  return Status::Ok();
}

}  // namespace mla::plan
