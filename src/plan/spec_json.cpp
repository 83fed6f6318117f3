#include "plan/spec_json.hpp"

namespace mla::plan {

nlohmann::json gpu_json(const GpuSpec& g) {
  nlohmann::json j = {{"name", g.name},           {"full_name", g.full_name},
                      {"arch", g.arch},           {"hbm_bytes", g.hbm_bytes},
                      {"hbm_bw", g.hbm_bw},       {"bf16_flops", g.bf16_flops},
                      {"fp8_flops", g.fp8_flops}, {"fp4_flops", g.fp4_flops},
                      {"nvlink_bw", g.nvlink_bw}, {"sms", g.sms},
                      {"l2_bytes", g.l2_bytes},   {"source", g.source}};
  if (g.measured_read_bw > 0)
    j["measured"] = {{"read_bw", g.measured_read_bw},
                     {"copy_bw", g.measured_copy_bw},
                     {"bf16_flops", g.measured_bf16_flops},
                     {"fp8_flops", g.measured_fp8_flops},
                     {"source", g.measured_source}};
  return j;
}

nlohmann::json model_json(const ModelSpec& m) {
  return {{"name", m.name},
          {"full_name", m.full_name},
          {"attention", m.native == AttentionKind::mla ? "mla" : "gqa"},
          {"params", m.params},
          {"active_params", m.active_params},
          {"weight_bytes_per_param", m.weight_bytes_per_param},
          {"weight_precision", m.weight_precision},
          {"layers", m.layers},
          {"hidden", m.hidden},
          {"heads", m.heads},
          {"d_c", m.d_c},
          {"d_r", m.d_r},
          {"d_nope", m.d_nope},
          {"d_v", m.d_v},
          {"head_dim_k", m.head_dim_k},
          {"head_dim_v", m.head_dim_v},
          {"gqa_kv_heads", m.gqa_kv_heads},
          {"indexer_heads", m.indexer_heads},
          {"indexer_dim", m.indexer_dim},
          {"indexer_bytes_per_token", m.indexer_bytes_per_token},
          {"trained_topk", m.trained_topk},
          {"routed_experts", m.routed_experts},
          {"experts_per_token", m.experts_per_token},
          {"source", m.source}};
}

}  // namespace mla::plan
