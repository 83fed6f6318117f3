// The cost model: FLOPs and bytes of each kernel in a step, and its roofline floor
// max(FLOPs / peak, bytes / bandwidth). Conventions of docs/design.md section 1 and
// docs/benchmarks.md: attention counts 2*h*(d_qk + d_v) FLOP per (query, key); bytes are what the
// kernel must move at least: each cache entry read once per request.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "plan/internal.hpp"

namespace mla::plan::detail {

StageCost make_stage(std::string name, std::string calib_kernel, std::string calib_format,
                     bool fp8_compute, double flops, double bytes, const Ceilings& c,
                     const Calibration* cal, int heads, double calls) {
  StageCost s;
  s.calls = calls;
  s.name = std::move(name);
  s.calib_kernel = std::move(calib_kernel);
  s.calib_format = std::move(calib_format);
  s.compute_ceiling = fp8_compute ? "fp8" : "bf16";
  s.flops = flops;
  s.bytes = bytes;
  s.compute_s = flops / (fp8_compute ? c.fp8_flops : c.bf16_flops);
  s.memory_s = bytes / c.read_bw;
  s.floor_s = std::max(s.compute_s, s.memory_s);
  s.binds = s.compute_s >= s.memory_s ? "compute" : "memory";
  s.predicted_s = s.floor_s;
  s.predicted_from = "roofline floor (no calibration)";
  if (cal != nullptr) {
    if (const CalibrationEntry* e = cal->find(s.calib_kernel, s.calib_format, heads)) {
      s.fraction_used = e->fraction_of_ceiling;
      s.overhead_s = calls * e->overhead_us * 1e-6;
      s.predicted_s = s.overhead_s + s.floor_s / e->fraction_of_ceiling;
      s.predicted_from = fmt::format(
          "measured {:.0f}% of the ceiling{} ({} {} h_q {})", 100 * e->fraction_of_ceiling,
          e->overhead_us > 0 ? fmt::format(" + {:.1f} us per call", e->overhead_us) : std::string(),
          e->kernel, e->format, e->h_q);
    } else {
      s.predicted_from = fmt::format("roofline floor (calibration has no {} {} entry)",
                                     s.calib_kernel, s.calib_format);
    }
  }
  return s;
}

StepCost combine(std::vector<StageCost> stages) {
  StepCost st;
  double longest = -1;
  for (const StageCost& s : stages) {
    st.flops += s.flops;
    st.bytes += s.bytes;
    st.floor_s += s.floor_s;
    st.predicted_s += s.predicted_s;
    if (s.floor_s > longest) {
      longest = s.floor_s;
      st.binds = s.binds;
    }
  }
  st.intensity = st.bytes > 0 ? st.flops / st.bytes : 0;
  st.stages = std::move(stages);
  return st;
}

const char* calib_format_tag(KvFormat f) {
  switch (f) {
    case KvFormat::mha_bf16: return "mha";
    case KvFormat::gqa_bf16: return "gqa";
    case KvFormat::mla_bf16: return "bf16";
    case KvFormat::mla_fp8: return "fp8";
    case KvFormat::mla_fp4: return "fp4";
  }
  return "?";
}

int64_t local_cache_bytes_per_token_layer(const ModelSpec& m, KvFormat f, int tp) {
  const int64_t whole = kv_bytes_per_token_layer(m, f);
  switch (f) {
    case KvFormat::mha_bf16:
      return whole / tp;  // heads split evenly (tp divides heads: checked by make_plan)
    case KvFormat::gqa_bf16: {
      // KV heads split over TP; with more ranks than KV heads each rank keeps one (replicated).
      const int64_t local_heads = std::max<int64_t>(1, (m.gqa_kv_heads + tp - 1) / tp);
      return local_heads * (m.head_dim_k + m.head_dim_v) * 2;
    }
    default: return whole;  // the MLA latent serves every head: each TP rank holds all of it
  }
}

namespace {

// Keys attended summed over the queries of one request: decode/speculative queries see
// the whole context (the newest see a few more: ignored, < s_q/L); causal prefill sees
// a triangle; `cap` limits each query to its top-k.
double attended_pairs(const StepShape& s, double cap) {
  const double L = static_cast<double>(s.context), n = s.new_tokens;
  if (!s.causal_prefill) return n * std::min(L, cap);
  // Prefill: query t (0-based) sees t+1 keys, at most cap.
  if (cap >= L) return L * (L + 1) / 2;
  return cap * (cap + 1) / 2 + (L - cap) * cap;
}

}  // namespace

StepCost step_cost(const ModelSpec& m, KvFormat f, bool dsa, const StepShape& s, const Ceilings& c,
                   const Calibration* cal) {
  const double B = static_cast<double>(s.batch), layers = m.layers, h = s.heads;
  const double L = static_cast<double>(s.context);
  const double entry = static_cast<double>(local_cache_bytes_per_token_layer(m, f, s.tp));
  const double inf = 1e300;
  std::vector<StageCost> stages;

  if (f == KvFormat::mha_bf16 || f == KvFormat::gqa_bf16) {
    // Cached K/V, one pass: 2*h*(d_k + d_v) FLOP per (query, key).
    const double flops =
        B * layers * attended_pairs(s, inf) * 2 * h * (m.head_dim_k + m.head_dim_v);
    // Decode reads each entry once; prefill writes the prompt's entries and reads them back.
    const double bytes = B * layers * L * entry * (s.causal_prefill ? 2 : 1);
    stages.push_back(make_stage("attention", s.causal_prefill ? "prefill" : "decode",
                                calib_format_tag(f), false, flops, bytes, c, cal, s.heads, layers));
    return combine(std::move(stages));
  }

  const double absorbed_per_pair = 2 * h * (m.d_c + m.d_r + m.d_c);  // 2*h*(576+512)
  const bool sparse = dsa && m.indexer_heads > 0 && L > s.topk;
  if (sparse) {
    // Lightning indexer: 2*H_I*D_I FLOP per (query, key) on fp8 tensor cores; reads every
    // key's 132-byte index entry once per request and writes one fp32 logit per (query, key).
    const double pairs_all = attended_pairs(s, inf);
    const double idx_flops = B * layers * pairs_all * 2.0 * m.indexer_heads * m.indexer_dim;
    const double idx_bytes = B * layers * (L * m.indexer_bytes_per_token + pairs_all * 4);
    stages.push_back(make_stage("indexer", "indexer", "fp8", true, idx_flops, idx_bytes, c, cal,
                                m.indexer_heads, layers));
    // Top-k reads the logits back and writes k int32 indices per query.
    const double topk_pairs = attended_pairs(s, s.topk);
    const double sel_bytes = B * layers * (pairs_all * 4 + topk_pairs * 4);
    stages.push_back(
        make_stage("top-k", "topk", "fp32", false, 0, sel_bytes, c, cal, s.heads, layers));
    // Sparse absorbed attention over the chosen keys. Bytes: the union of the requests'
    // selections (at most min(L, queries*k) entries each) plus the indices.
    const double flops = B * layers * topk_pairs * absorbed_per_pair;
    const double union_keys =
        s.causal_prefill ? L : std::min(L, static_cast<double>(s.new_tokens) * s.topk);
    const double bytes = B * layers * (union_keys * entry + topk_pairs * 4);
    stages.push_back(make_stage("sparse attention",
                                s.causal_prefill ? "sparse_prefill" : "sparse_decode",
                                calib_format_tag(f), false, flops, bytes, c, cal, s.heads, layers));
    return combine(std::move(stages));
  }

  if (!s.causal_prefill) {
    // Dense absorbed decode (MQA form): 1 KV head, d_qk 576, d_v 512.
    const double flops = B * layers * attended_pairs(s, inf) * absorbed_per_pair;
    const double bytes = B * layers * L * entry;
    stages.push_back(make_stage("attention", "decode", calib_format_tag(f), false, flops, bytes, c,
                                cal, s.heads, layers));
    return combine(std::move(stages));
  }
  // Dense prefill, non-absorbed form: decompress K_nope and V for every key
  // (2*d_c*h*(d_nope + d_v) FLOP per key), then causal MHA with d_qk 192, d_v 128. Bytes:
  // the cache written, and the decompressed K/V written and read back once.
  const double kv_mha = h * (m.d_nope + m.d_r + m.d_v) * 2.0;
  const double dec_flops = B * layers * L * 2.0 * m.d_c * h * (m.d_nope + m.d_v);
  const double dec_bytes = B * layers * L * (entry + kv_mha);
  stages.push_back(make_stage("K/V decompression", "decompress", calib_format_tag(f), false,
                              dec_flops, dec_bytes, c, cal, s.heads, layers));
  const double att_flops = B * layers * attended_pairs(s, inf) * 2 * h * (m.d_nope + m.d_r + m.d_v);
  const double att_bytes = B * layers * L * kv_mha;
  stages.push_back(make_stage("attention (non-absorbed)", "prefill", "mha", false, att_flops,
                              att_bytes, c, cal, s.heads, layers));
  return combine(std::move(stages));
}

}  // namespace mla::plan::detail
