// The recommended configuration, one reason per choice. Every threshold is either
// derived from the roofline here or a named constant in internal.hpp marked as a
// datasheet estimate; a calibration file moves the ones that depend on kernel
// efficiency.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string_view>

#include "plan/internal.hpp"

namespace mla::plan {

double absorbed_breakeven_new_tokens(const ModelSpec& m, double fa, double fn, double fd) {
  if (fd <= 0) fd = fn;
  // Per head: absorbed 2*(d_c+d_r+d_c) FLOP per (query, key); non-absorbed
  // 2*(d_nope+d_r+d_v) per (query, key) plus 2*d_c*(d_nope+d_v) per key to decompress.
  const double A = 2.0 * (m.d_c + m.d_r + m.d_c);
  const double N = 2.0 * (m.d_nope + m.d_r + m.d_v);
  const double D = 2.0 * m.d_c * (m.d_nope + m.d_v);
  const double denom = A / fa - N / fn;
  return denom > 0 ? (D / fd) / denom : HUGE_VAL;
}

namespace detail {
namespace {

int64_t pow2ceil(double x) {
  int64_t p = 1;
  while (static_cast<double>(p) < x) p *= 2;
  return p;
}

const FormatPlan* find_row(const Plan& p, KvFormat f, bool dsa) {
  for (const FormatPlan& fp : p.formats)
    if (fp.format == f && fp.dsa == dsa) return &fp;
  return nullptr;
}

StepShape shape_of(const Plan& p, int64_t context) {
  const Workload& w = p.workload;
  if (w.phase == Phase::prefill) return {1, context, 1, p.heads_per_gpu, w.tp, w.topk, true};
  return {w.batch, context, w.new_tokens, p.heads_per_gpu, w.tp, w.topk, false};
}

// Smallest context (in pages) above top-k where the DSA step's floor is below the dense
// one; 0 when it never is up to the planner's 16M limit.
int64_t dsa_crossover(const Plan& p, KvFormat f) {
  const ModelSpec& m = *p.model;
  auto cheaper = [&](int64_t L) {
    const StepShape s = shape_of(p, L);
    return step_cost(m, f, true, s, p.ceilings, nullptr).floor_s <
           step_cost(m, f, false, s, p.ceilings, nullptr).floor_s;
  };
  return first_context_where_dsa_is_cheaper(p.workload.topk, cheaper);
}

struct ChunkChoice {
  int64_t tokens;
  std::string reason;
};

ChunkChoice chunk_size(const Plan& p, bool sparse_prefill) {
  const ModelSpec& m = *p.model;
  const Workload& w = p.workload;
  struct Need {
    double tokens;
    std::string why;
  };
  std::vector<Need> needs;
  // Non-absorbed attention of n new tokens against bf16 K/V does ~n FLOP per byte.
  if (!sparse_prefill)
    needs.push_back({p.ridge_bf16,
                     fmt::format("attention compute-bound needs n >= ridge {:.0f}", p.ridge_bf16)});
  // Weight GEMMs: t tokens per weight do 2t FLOP per weight, i.e. 2t/bytes FLOP per byte.
  const bool fp8_weights = m.weight_bytes_per_param <= 1.0;
  const double ridge_w = fp8_weights ? p.ridge_fp8 : p.ridge_bf16;
  const double t_need = ridge_w * m.weight_bytes_per_param / 2;
  if (m.routed_experts > 0) {
    // Data-parallel attention: each of the weight_shards GPUs brings n tokens; each expert
    // sees n * shards * experts_per_token / routed_experts of them.
    const double n = t_need * m.routed_experts / (double(m.experts_per_token) * w.weight_shards);
    needs.push_back({n, fmt::format("{} experts/token over {} shards: expert GEMMs compute-bound "
                                    "need n >= {:.0f}",
                                    m.experts_per_token, w.weight_shards, n)});
  } else {
    needs.push_back({t_need, fmt::format("weight GEMMs compute-bound need n >= {:.0f}", t_need)});
  }
  if (m.native == AttentionKind::mla && !sparse_prefill) {
    // Each chunk decompresses the whole prefix again: 2*d_c*(d_nope+d_v) FLOP per head per key
    // against the chunk's 2*(d_nope+d_r+d_v)*n.
    const double n = double(m.d_c) * (m.d_nope + m.d_v) /
                     (double(m.d_nope + m.d_r + m.d_v) * kChunkDecompressOverhead);
    needs.push_back({n, fmt::format("prefix re-decompression <= {:.0f}% of a chunk needs n >= "
                                    "{:.0f}",
                                    100 * kChunkDecompressOverhead, n)});
  }
  needs.push_back(
      {double(kMinChunkTokens),
       fmt::format("fixed per-chunk costs need n >= {} (datasheet estimate)", kMinChunkTokens)});
  const Need* top = &needs[0];
  for (const Need& n : needs)
    if (n.tokens > top->tokens) top = &n;
  int64_t chunk = std::min<int64_t>(pow2ceil(top->tokens), kMaxChunkTokens);
  std::string reason = top->why;
  if (chunk > w.context) {
    chunk = w.context;
    reason += fmt::format("; the {}-token prompt fits in one chunk", w.context);
  } else {
    reason += fmt::format(" -> next power of two (cap {})", kMaxChunkTokens);
  }
  return {chunk, reason};
}

// The layer view's line: the projections' share of the layer's floor and, when the row
// is DSA's, the dense/DSA ratio of the whole layer beside attention's alone.
Recommendation layer_recommendation(const Plan& p, const FormatPlan& r, const FormatPlan* dense) {
  const double n = p.model->layers;
  const StageCost& proj = r.layer.stages.back();
  const double share = proj.floor_s / r.layer.floor_s;
  const std::string prec = weight_precision_name(p.workload.weights);
  std::string choice =
      fmt::format("{}: {} per layer = attention {} + projections {} ({} weights, {:.0f}%)", r.name,
                  fmt_time(r.layer.floor_s / n), fmt_time(r.step.floor_s / n),
                  fmt_time(proj.floor_s / n), prec, 100 * share);
  std::string reason =
      share > 0.5 ? fmt::format(
                        "projections dominate: each step reads the layer's {} of {} weights "
                        "({}-bound) while attention needs {}",
                        fmt_bytes(r.projections.weight_bytes), prec, proj.binds,
                        fmt_time(r.step.floor_s / n))
                  : fmt::format(
                        "attention dominates; the projections read {} of {} weights per layer "
                        "per step ({}-bound)",
                        fmt_bytes(r.projections.weight_bytes), prec, proj.binds);
  if (r.dsa && dense != nullptr && dense != &r && r.layer.floor_s > 0 && r.step.floor_s > 0)
    reason += fmt::format(
        "; dense/DSA: {:.1f}x on attention alone, {:.1f}x on the whole layer "
        "({} vs {} per layer)",
        dense->step.floor_s / r.step.floor_s, dense->layer.floor_s / r.layer.floor_s,
        fmt_time(dense->layer.floor_s / n), fmt_time(r.layer.floor_s / n));
  return {"layer", choice, reason};
}

}  // namespace

std::vector<Recommendation> recommend(const Plan& p, const Calibration* cal) {
  const ModelSpec& m = *p.model;
  const GpuSpec& g = *p.gpu;
  const Workload& w = p.workload;
  std::vector<Recommendation> out;
  const bool blackwell = std::string_view(g.arch) == "blackwell";

  if (m.native == AttentionKind::gqa) {
    out.push_back({"attention form", "GQA (cached K/V)",
                   fmt::format("{} has no latent: {} KV heads of {} are cached as they are", m.name,
                               m.gqa_kv_heads, m.head_dim_k)});
    out.push_back({"DSA", "n/a",
                   "the planner prices sparse attention for MLA "
                   "models only"});
    const ChunkChoice c = chunk_size(p, false);
    out.push_back({"chunk size", fmt::format("{}", c.tokens), c.reason});
    out.push_back({"KV precision", "bf16", "the planner prices GQA caches in bf16 only"});
    if (const FormatPlan* r = find_row(p, KvFormat::gqa_bf16, false))
      out.push_back(layer_recommendation(p, *r, nullptr));
    return out;
  }

  const bool has_indexer = m.indexer_heads > 0;
  const bool dsa_active = has_indexer && w.context > w.topk;
  const ChunkChoice chunk = chunk_size(p, dsa_active);

  // 1. absorbed vs non-absorbed, by new tokens per request.
  double fa = 1, fn = 1, fd = -1;
  std::string from = "datasheet estimate: FLOP break-even at equal kernel efficiency";
  if (cal != nullptr) {
    const CalibrationEntry* a = cal->find("decode", "bf16", p.heads_per_gpu);
    const CalibrationEntry* n = cal->find("prefill", "mha", p.heads_per_gpu);
    if (a != nullptr && n != nullptr) {
      fa = a->fraction_of_ceiling;
      fn = n->fraction_of_ceiling;
      from = fmt::format("calibrated: decode at {:.0f}%, prefill at {:.0f}% of the ceiling",
                         100 * fa, 100 * fn);
      if (const CalibrationEntry* d = cal->find("decompress", "mha", p.heads_per_gpu)) {
        fd = d->fraction_of_ceiling;
        from += fmt::format(", decompression at {:.0f}%", 100 * fd);
      }
    }
  }
  const double nstar = absorbed_breakeven_new_tokens(m, fa, fn, fd);
  const int64_t n_new = w.phase == Phase::decode ? w.new_tokens : chunk.tokens;
  if (dsa_active) {
    out.push_back({"attention form", "absorbed (MQA form), decode and prefill",
                   fmt::format("with DSA each query reads only top-{} keys: decompressing all "
                               "{} keys for the MHA form would be wasted (DeepSeek-V3.2 runs "
                               "both phases in MQA form)",
                               w.topk, w.context)});
  } else {
    const bool absorbed = n_new <= nstar;
    out.push_back({"attention form", absorbed ? "absorbed (MQA form)" : "non-absorbed (MHA form)",
                   fmt::format("{} new tokens per request {} {:.0f}, the break-even ({})", n_new,
                               absorbed ? "<=" : ">", nstar, from)});
  }

  // 2. DSA on/off, top-k or block parameters.
  const KvFormat asked = w.kv == KvPrecision::bf16  ? KvFormat::mla_bf16
                         : w.kv == KvPrecision::fp8 ? KvFormat::mla_fp8
                                                    : KvFormat::mla_fp4;
  if (has_indexer) {
    const int64_t cross = dsa_crossover(p, asked);
    const FormatPlan* dense = find_row(p, asked, false);
    const FormatPlan* sparse = find_row(p, asked, true);
    std::string roof =
        cross > 0 ? fmt::format("; on the roofline DSA is cheaper from {} tokens", fmt_int(cross))
                  : std::string("; on the roofline DSA never beats dense here");
    if (dsa_active && dense && sparse)
      roof += fmt::format(" (here {} vs dense {})", fmt_time(sparse->step.floor_s),
                          fmt_time(dense->step.floor_s));
    out.push_back(
        {"DSA",
         dsa_active ? fmt::format("on (context {} > top-k {})", w.context, w.topk)
                    : fmt::format("off here (context {} <= top-k {})", w.context, w.topk),
         fmt::format("at or below top-k every key is selected, so dense attention is exact and "
                     "skips the indexer; above it the model is defined by its top-k{}",
                     roof)});
    out.push_back(
        {"top-k", fmt::format("{}", w.topk),
         w.topk == m.trained_topk
             ? fmt::format("the value {} was trained with; the indexer scores all keys with "
                           "{} heads x {} in fp8",
                           m.name, m.indexer_heads, m.indexer_dim)
             : fmt::format("you asked {}; {} was trained with {}: other values change its "
                           "outputs",
                           w.topk, m.name, m.trained_topk)});
  } else {
    out.push_back({"DSA", "n/a", fmt::format("{} has no lightning indexer", m.name)});
    out.push_back(
        {"block-sparse",
         blackwell ? "off; if enabled: block 32, stride 16, selected 64, 16 blocks, window 512, "
                     "1 initial + 2 local"
                   : "off; if enabled: block 64, stride 32, selected 64, 12 blocks, window 512, "
                     "1 initial + 2 local",
         "block selection approximates the model's dense attention (quality unverified); the "
         "parameters are seed 000's per-GPU presets (NSA's, arXiv 2502.11089)"});
  }

  // 3. chunk size.
  out.push_back({"chunk size", fmt::format("{}", chunk.tokens), chunk.reason});

  // 4. KV precision.
  const FormatPlan* b16 = find_row(p, KvFormat::mla_bf16, has_indexer);
  const FormatPlan* f8 = find_row(p, KvFormat::mla_fp8, has_indexer);
  const FormatPlan* f4 = find_row(p, KvFormat::mla_fp4, has_indexer);
  if (b16 && f8) {
    std::string choice, reason;
    if (p.free_bytes <= 0) {
      // Nothing fits: no cache precision can be chosen for capacity or speed.
      choice = "none fits";
      reason = fmt::format(
          "{} of weights per GPU leave no room for any KV cache in {}: spread the weights "
          "over >= {} GPUs (--weight-shards)",
          fmt_bytes(p.weights_bytes_per_gpu), fmt_bytes(p.usable_hbm_bytes), p.min_weight_shards);
    } else if (!b16->batch_fits) {
      choice = "fp8 (656 B/token/layer)";
      reason = fmt::format("bf16 fits {} requests, fp8 {}: the batch of {} needs fp8{}",
                           b16->max_batch, f8->max_batch, w.batch,
                           f8->batch_fits ? "" : " (and still does not fit: lower the batch)");
    } else if (f8->step.floor_s < kFp8SpeedupThreshold * b16->step.floor_s) {
      // The stage that reads the cache is memory-bound: fewer bytes, less time.
      choice = "fp8 (656 B/token/layer)";
      reason = fmt::format(
          "the cache read is memory-bound: fp8 moves 57% of its bytes, floor {} vs {} (bf16); "
          "and fits {} requests vs {}",
          fmt_time(f8->step.floor_s), fmt_time(b16->step.floor_s), f8->max_batch, b16->max_batch);
    } else {
      choice = "bf16 (1152 B/token/layer)";
      reason = fmt::format(
          "the batch fits and fp8 saves no time (floor {} vs {}: the stage reading the cache is "
          "compute-bound, AI {:.0f} > ridge {:.0f}) while adding dequantisation; choose fp8 "
          "when capacity limits you: {} requests vs {}",
          fmt_time(f8->step.floor_s), fmt_time(b16->step.floor_s),
          b16->step.stages.back().flops / b16->step.stages.back().bytes, p.ridge_bf16,
          f8->max_batch, b16->max_batch);
    }
    if (blackwell && f4)
      reason += fmt::format("; fp4 (416 B, on paper) would fit {}", f4->max_batch);
    out.push_back({"KV precision", choice, reason});
  }
  // 5. the whole layer: do the projections or attention set the step?
  if (const FormatPlan* r = find_row(p, asked, has_indexer))
    out.push_back(layer_recommendation(p, *r, find_row(p, asked, false)));
  // 6. attention over several GPUs (decode): split the batch, not the heads.
  if (w.phase == Phase::decode) {
    // A head split over 2 GPUs runs h/2 heads over a cache replicated on both: per key
    // 2*(h/2)*(d_c+d_r+d_c) FLOP against one entry, i.e. half of the unsplit intensity.
    const double entry = double(kv_bytes_per_token_layer(m, asked));
    const double half_heads_intensity = m.heads * (m.d_c + m.d_r + m.d_c) / entry;
    const bool measured = std::string_view(g.name) == "h200";
    out.push_back(
        {"attention across GPUs", "batch split (data-parallel attention)",
         measured
             ? fmt::format(
                   "measured on 2 H200 (NV18, 2026-11-29, examples/attn_split): a head split "
                   "took 0.98-1.21x the batch split's step (B 2-64, 4K-128K, bf16 and fp8) and "
                   "replicates the cache, so it serves half the requests{}",
                   w.tp > 1 ? fmt::format("; tp {} asked: heads split {} ways", w.tp, w.tp) : "")
             : fmt::format(
                   "on paper: a 2-way head split does {:.0f} FLOP per cache byte against the "
                   "ridge's {:.0f}, so it is memory-bound on a cache read twice, and it serves "
                   "half the requests (docs/multi-gpu.md section 4)",
                   half_heads_intensity, p.ridge_bf16)});
  }
  // 7. batch.
  if (const FormatPlan* asked_row = find_row(p, asked, has_indexer)) {
    if (p.free_bytes <= 0)
      out.push_back(
          {"weights", fmt::format(">= {} weight shards", p.min_weight_shards),
           fmt::format("{} of weights per GPU leave no room for KV in {}",
                       fmt_bytes(p.weights_bytes_per_gpu), fmt_bytes(p.usable_hbm_bytes))});
    else
      out.push_back({"batch", fmt::format("<= {} with {}", asked_row->max_batch, asked_row->name),
                     fmt::format("{} free after {} of weights / {} per request",
                                 fmt_bytes(p.free_bytes), fmt_bytes(p.weights_bytes_per_gpu),
                                 fmt_bytes(asked_row->kv_bytes_per_request))});
  }
  return out;
}

}  // namespace detail
}  // namespace mla::plan
