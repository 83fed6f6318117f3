// Model table of the planner: parameter counts (for the weights beside the KV),
// layer counts and attention dims. Each row names its source.
#include <array>

#include "mla/plan.hpp"
#include "plan/lookup.hpp"

namespace mla::plan {
namespace {

// DeepSeek-V3.2's lightning indexer per layer: wq_b 1536 -> 64x128, wk 7168 -> 128,
// weights_proj 7168 -> 64 (DeepSeek-V3.2 inference/model.py, class Indexer).
constexpr double kV32IndexerParamsPerLayer = 1536.0 * 64 * 128 + 7168.0 * 128 + 7168.0 * 64;
// A dense transformer's weights are ~12 * layers * hidden^2 (4 h^2 attention + 8 h^2 MLP);
// seed 004 gives no parameter count ("a typical model of tens of billions"), so we use this.
constexpr double kSeed004Params = 12.0 * 64 * 7168 * 7168;  // 39.5e9

// DeepSeek-V3 technical report (arXiv 2412.19437) and config.json: 671B total (MTP module
// excluded), 37B activated, 61 layers, hidden 7168, 128 heads, kv_lora_rank 512, qk_rope 64,
// qk_nope 128, v_head 128, 256 routed experts, 8 per token. Weights released in FP8 (e4m3,
// 128x128 block scales): ~1 byte per parameter.
constexpr ModelSpec kDeepSeekV3 = {
    .name = "deepseek-v3",
    .full_name = "DeepSeek-V3",
    .native = AttentionKind::mla,
    .params = 671e9,
    .active_params = 37e9,
    .weight_bytes_per_param = 1.0,
    .weight_precision = "fp8 (DeepSeek's released weights)",
    .layers = 61,
    .hidden = 7168,
    .heads = 128,
    .d_c = 512,
    .d_r = 64,
    .d_nope = 128,
    .d_v = 128,
    .head_dim_k = 192,
    .head_dim_v = 128,
    .routed_experts = 256,
    .experts_per_token = 8,
    .source = "DeepSeek-V3 technical report (arXiv 2412.19437); config.json",
    .q_lora_rank = 1536};

// DeepSeek-V3.2(-Exp) config.json and inference/model.py: V3's dims plus, in every layer, a
// lightning indexer of 64 heads x 128 (index_n_heads, index_head_dim), index_topk 2048,
// indexer key cache 128 e4m3 + one fp32 scale = 132 B per token.
constexpr ModelSpec deepseek_v32() {
  ModelSpec m = kDeepSeekV3;
  m.name = "deepseek-v3.2";
  m.full_name = "DeepSeek-V3.2";
  m.params += m.layers * kV32IndexerParamsPerLayer;
  m.active_params += m.layers * kV32IndexerParamsPerLayer;
  m.indexer_heads = 64;
  m.indexer_dim = 128;
  m.indexer_bytes_per_token = 132;
  m.trained_topk = 2048;
  m.source = "DeepSeek-V3.2 config.json and inference/model.py (Indexer); docs/design.md section 2";
  return m;
}

constexpr std::array<ModelSpec, 5> kModels = {
    kDeepSeekV3, deepseek_v32(),
    // DeepSeek-V2-Lite model card and config.json: 15.7B total, 2.4B activated, 27 layers,
    // hidden 2048, 16 heads, kv_lora_rank 512, rope 64, nope 128, v 128, 64 routed experts, 6
    // per token. Released in BF16.
    ModelSpec{
        .name = "deepseek-v2-lite",
        .full_name = "DeepSeek-V2-Lite",
        .native = AttentionKind::mla,
        .params = 15.7e9,
        .active_params = 2.4e9,
        .weight_bytes_per_param = 2.0,
        .weight_precision = "bf16 (released weights)",
        .layers = 27,
        .hidden = 2048,
        .heads = 16,
        .d_c = 512,
        .d_r = 64,
        .d_nope = 128,
        .d_v = 128,
        .head_dim_k = 192,
        .head_dim_v = 128,
        .routed_experts = 64,
        .experts_per_token = 6,
        .source = "DeepSeek-V2 paper (arXiv 2405.04434) appendix; DeepSeek-V2-Lite config.json"},
    // Seed 004's example: 64 layers, hidden 7168, 128 heads, MLA with d_c 512 and d_R 64; its
    // MHA form caches K and V of 7168 each (head dim 56), its GQA form has 8 KV heads. The
    // seed gives no parameter count nor non-absorbed head dims: we assume a dense
    // 12*L*h^2 model in BF16 and V3's nope/value dims (128).
    ModelSpec{.name = "seed004-64l",
              .full_name = "Seed 004's 64-layer example (7168 hidden, 128 heads)",
              .native = AttentionKind::mla,
              .params = kSeed004Params,
              .active_params = kSeed004Params,
              .weight_bytes_per_param = 2.0,
              .weight_precision = "bf16 (assumed: the seed gives none)",
              .layers = 64,
              .hidden = 7168,
              .heads = 128,
              .d_c = 512,
              .d_r = 64,
              .d_nope = 128,
              .d_v = 128,
              .head_dim_k = 56,
              .head_dim_v = 56,
              .gqa_kv_heads = 8,
              .source = "seeds/004 (dims); parameter count estimated as 12*layers*hidden^2"},
    // Meta Llama 3.1 model card and config.json: 405B dense, 126 layers, hidden 16384, 128 query
    // heads, 8 KV heads (GQA-8), head dim 128. Released in BF16 (an FP8 variant exists).
    ModelSpec{.name = "llama-3.1-405b",
              .full_name = "Llama-3.1-405B",
              .native = AttentionKind::gqa,
              .params = 405e9,
              .active_params = 405e9,
              .weight_bytes_per_param = 2.0,
              .weight_precision = "bf16 (released weights)",
              .layers = 126,
              .hidden = 16384,
              .heads = 128,
              .head_dim_k = 128,
              .head_dim_v = 128,
              .gqa_kv_heads = 8,
              .source = "Meta Llama 3.1 model card; config.json"}};

}  // namespace

std::span<const ModelSpec> known_models() {
  return kModels;
}

Status find_model(std::string_view name, const ModelSpec** out) {
  return detail::find_by_name(known_models(), name, "model", out);
}

}  // namespace mla::plan
