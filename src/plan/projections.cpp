// The layer view's projections stage: the attention layer's weight GEMMs. At decode
// every step reads each weight once for a handful of tokens, so the stage is
// memory-bound on the weights (402 MB per V3.2 layer in bf16) until the tokens per
// step reach the ridge: 2 FLOP per 2-byte weight per token is 1 FLOP/B per token, so
// ~180 tokens at bf16 on the H200 (792 TFLOP/s / 4391 GB/s). docs/planner.md.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "plan/internal.hpp"
#include "plan/lookup.hpp"

namespace mla::plan {

namespace {
constexpr detail::EnumName<WeightPrecision> kWeightPrecisions[] = {
    {WeightPrecision::released, "released"},
    {WeightPrecision::bf16, "bf16"},
    {WeightPrecision::fp8, "fp8"}};
}  // namespace

const char* weight_precision_name(WeightPrecision p) {
  return detail::enum_name(kWeightPrecisions, p);
}

Status parse_weight_precision(std::string_view name, WeightPrecision* out) {
  return detail::parse_enum(kWeightPrecisions, name, "weights", "weight precisions", out);
}

namespace {

// One weight matrix [out, in] of the layer on this GPU, read once per step, and whether
// each new token runs through it (y = W x: 2 x in x out FLOP, an input and an output
// vector); W_UK/W_UV of the non-absorbed prefill are read by the decompression instead.
struct Gemm {
  double out, in;
  bool per_token;
  double groups = 1;  // per-head matrices: one [out, in] per head
};

// fp8 weights carry one fp32 scale per 128 x 128 block (DeepSeek's released format).
constexpr double kFp8BlockEdge = 128;
constexpr double kFp8ScaleBytes = 4;
// Activations move in bf16 between the GEMMs.
constexpr double kActivationBytes = 2;

double blocks(double n) {
  return std::ceil(n / kFp8BlockEdge);
}

std::vector<Gemm> mla_gemms(const ModelSpec& m, double h, bool indexer_queries,
                            bool per_token_absorb) {
  const double H = m.hidden, qk = m.d_nope + m.d_r;
  std::vector<Gemm> g;
  if (m.q_lora_rank > 0) {
    g.push_back({double(m.q_lora_rank), H, true});       // wq_a, replicated over TP
    g.push_back({h * qk, double(m.q_lora_rank), true});  // wq_b, heads split over TP
  } else {
    g.push_back({h * qk, H, true});  // wq (no query latent)
  }
  g.push_back({double(m.d_c + m.d_r), H, true});  // wkv_a, replicated
  // wkv_b's halves, per head: W_UK folds q_nope into the latent (d_nope -> d_c), W_UV
  // expands the latent output (d_c -> d_v): h matrices each.
  g.push_back({double(m.d_c), double(m.d_nope), per_token_absorb, h});  // W_UK: h x [d_c, d_nope]
  g.push_back({double(m.d_v), double(m.d_c), per_token_absorb, h});     // W_UV: h x [d_v, d_c]
  g.push_back({H, h * m.d_v, true});                                    // o_proj, split (row)
  if (m.indexer_heads > 0) {
    // V3.2's indexer, replicated (all 64 heads on every GPU). wk runs every step (its key
    // cache is appended even by dense steps); wq_b and weights_proj only when it scores.
    const double ih = m.indexer_heads, id = m.indexer_dim;
    g.push_back({id, H, true});  // wk
    if (indexer_queries) {       // a dense step neither reads nor runs these
      g.push_back({ih * id, double(m.q_lora_rank), true});  // wq_b
      g.push_back({ih, H, true});                           // weights_proj
    }
  }
  return g;
}

std::vector<Gemm> gqa_gemms(const ModelSpec& m, KvFormat f, int tp, double h) {
  const double H = m.hidden;
  const int kv_heads = f == KvFormat::mha_bf16 ? m.heads : m.gqa_kv_heads;
  const double local_kv =
      f == KvFormat::mha_bf16 ? double(kv_heads) / tp : std::max(1, (kv_heads + tp - 1) / tp);
  return {{h * m.head_dim_k, H, true},
          {local_kv * m.head_dim_k, H, true},
          {local_kv * m.head_dim_v, H, true},
          {H, h * m.head_dim_v, true}};
}

}  // namespace

LayerProjections layer_projections(const ModelSpec& m, KvFormat f, int heads_per_gpu, bool fp8,
                                   bool indexer_queries, bool per_token_absorb) {
  const double h = heads_per_gpu;
  const bool mla_weights = m.native == AttentionKind::mla && f != KvFormat::gqa_bf16;
  const std::vector<Gemm> gemms =
      mla_weights ? mla_gemms(m, h, indexer_queries, per_token_absorb)
                  : gqa_gemms(m, f, heads_per_gpu > 0 ? m.heads / heads_per_gpu : 1, h);
  LayerProjections p;
  p.fp8 = fp8;
  for (const Gemm& g : gemms) {
    const double n = g.groups * g.out * g.in;
    p.params += n;
    p.weight_bytes += fp8 ? n + g.groups * blocks(g.out) * blocks(g.in) * kFp8ScaleBytes : 2 * n;
    if (g.per_token) {
      p.flops_per_token += 2 * n;
      p.activation_bytes_per_token += kActivationBytes * g.groups * (g.in + g.out);
    }
  }
  return p;
}

namespace detail {

bool released_weights_fp8(const ModelSpec& m) {
  return m.weight_bytes_per_param <= 1.0;
}

StageCost projections_stage(const LayerProjections& lp, double tokens, int layers,
                            const Ceilings& c, const Calibration* cal, int heads) {
  // Each layer's weights are read once per step whatever the token count (decode) and
  // every token runs the GEMMs; activations are read and written once.
  const double flops = layers * tokens * lp.flops_per_token;
  const double bytes = layers * (lp.weight_bytes + tokens * lp.activation_bytes_per_token);
  return make_stage("projections", "projections", lp.fp8 ? "fp8" : "bf16", lp.fp8, flops, bytes, c,
                    cal, heads, layers);
}

StepCost layer_step(const StepCost& attention, const StageCost& projections) {
  std::vector<StageCost> stages = attention.stages;
  stages.push_back(projections);
  return combine(std::move(stages));
}

}  // namespace detail
}  // namespace mla::plan
