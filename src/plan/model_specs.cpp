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

constexpr std::array<ModelSpec, 5> kModels = {{
    // DeepSeek-V3 technical report (arXiv 2412.19437) and config.json: 671B total (MTP module
    // excluded), 37B activated, 61 layers, hidden 7168, 128 heads, kv_lora_rank 512,
    // qk_rope 64, qk_nope 128, v_head 128, 256 routed experts, 8 per token. Weights released
    // in FP8 (e4m3, 128x128 block scales): ~1 byte per parameter.
    {"deepseek-v3",
     "DeepSeek-V3",
     AttentionKind::mla,
     671e9,
     37e9,
     1.0,
     "fp8 (DeepSeek's released weights)",
     61,
     7168,
     128,
     512,
     64,
     128,
     128,
     192,
     128,
     0,
     0,
     0,
     0,
     0,
     256,
     8,
     "DeepSeek-V3 technical report (arXiv 2412.19437); config.json",
     1536},
    // DeepSeek-V3.2(-Exp) config.json and inference/model.py: V3's dims plus, in every layer, a
    // lightning indexer of 64 heads x 128 (index_n_heads, index_head_dim), index_topk 2048,
    // indexer key cache 128 e4m3 + one fp32 scale = 132 B per token.
    {"deepseek-v3.2",
     "DeepSeek-V3.2",
     AttentionKind::mla,
     671e9 + 61 * kV32IndexerParamsPerLayer,
     37e9 + 61 * kV32IndexerParamsPerLayer,
     1.0,
     "fp8 (DeepSeek's released weights)",
     61,
     7168,
     128,
     512,
     64,
     128,
     128,
     192,
     128,
     0,
     64,
     128,
     132,
     2048,
     256,
     8,
     "DeepSeek-V3.2 config.json and inference/model.py (Indexer); docs/design.md section 2",
     1536},
    // DeepSeek-V2-Lite model card and config.json: 15.7B total, 2.4B activated, 27 layers,
    // hidden 2048, 16 heads, kv_lora_rank 512, rope 64, nope 128, v 128, 64 routed experts, 6
    // per token. Released in BF16.
    {"deepseek-v2-lite",
     "DeepSeek-V2-Lite",
     AttentionKind::mla,
     15.7e9,
     2.4e9,
     2.0,
     "bf16 (released weights)",
     27,
     2048,
     16,
     512,
     64,
     128,
     128,
     192,
     128,
     0,
     0,
     0,
     0,
     0,
     64,
     6,
     "DeepSeek-V2 paper (arXiv 2405.04434) appendix; DeepSeek-V2-Lite config.json",
     0},
    // Seed 004's example: 64 layers, hidden 7168, 128 heads, MLA with d_c 512 and d_R 64; its
    // MHA form caches K and V of 7168 each (head dim 56), its GQA form has 8 KV heads. The
    // seed gives no parameter count nor non-absorbed head dims: we assume a dense
    // 12*L*h^2 model in BF16 and V3's nope/value dims (128).
    {"seed004-64l",
     "Seed 004's 64-layer example (7168 hidden, 128 heads)",
     AttentionKind::mla,
     kSeed004Params,
     kSeed004Params,
     2.0,
     "bf16 (assumed: the seed gives none)",
     64,
     7168,
     128,
     512,
     64,
     128,
     128,
     56,
     56,
     8,
     0,
     0,
     0,
     0,
     0,
     0,
     "seeds/004 (dims); parameter count estimated as 12*layers*hidden^2",
     0},
    // Meta Llama 3.1 model card and config.json: 405B dense, 126 layers, hidden 16384, 128 query
    // heads, 8 KV heads (GQA-8), head dim 128. Released in BF16 (an FP8 variant exists).
    {"llama-3.1-405b",
     "Llama-3.1-405B",
     AttentionKind::gqa,
     405e9,
     405e9,
     2.0,
     "bf16 (released weights)",
     126,
     16384,
     128,
     0,
     0,
     0,
     0,
     128,
     128,
     8,
     0,
     0,
     0,
     0,
     0,
     0,
     "Meta Llama 3.1 model card; config.json",
     0},
}};

}  // namespace

std::span<const ModelSpec> known_models() {
  return kModels;
}

Status find_model(std::string_view name, const ModelSpec** out) {
  return detail::find_by_name(known_models(), name, "model", out);
}

}  // namespace mla::plan
