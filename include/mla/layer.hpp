// The whole DeepSeek-V3.2 attention layer forward (issue 8): projections,
// norms, RoPE, the lightning indexer, cache append, attention by path, W_UV
// and the output projection, composed from the library's operations.
//
// Per new token t (hidden x_t [hidden]), with Linear weights stored [out, in]
// (y = W x, as DeepSeek's checkpoints store them):
//   q_lat  = RMSNorm(W_qa x_t) * q_norm                      [q_lora_rank]
//   q      = W_qb q_lat, per head [q_nope (d_nope) ; q_rope (d_r)]
//   kv     = W_kva x_t = [c_raw (d_c) ; k_rope_raw (d_r)]
//   c_kv   = RMSNorm(c_raw) * kv_norm;  k_rope = RoPE(k_rope_raw)   (interleaved pairs)
//   q_rope = RoPE(q_rope)                                        (interleaved pairs)
//   cache <- (c_kv, k_rope) at the token's slot (bf16 or fp8_ds_mla: the
//            attention below reads the cache, so it sees the stored precision)
// Attention over the cached keys s < len (causal among the new tokens), by path:
//   absorbed      q~_h = [W_UK[h]^T q_nope_h ; q_rope_h] (576), mla_decode,
//                 o_h = W_UV[h] o_lat_h
//   non_absorbed  k_nope = W_UK c_kv, v = W_UV c_kv per head (decompress_kv),
//                 causal MHA with d_qk d_nope + d_r, d_v (mha_prefill)
//   sparse (DSA)  the lightning indexer below picks top-k keys per token;
//                 absorbed attention over them only (sparse_decode)
//   out_t = W_o [o_1 ; ... ; o_h]                                [hidden]
// Lightning indexer (DeepSeek-V3.2's inference code):
//   qi     = W_iqb q_lat, per head [rope (d_r) ; rest]      [64, 128]
//   ki     = LayerNorm(W_ik x_t) (weight, bias), [rope ; rest]  [128]
//   rope parts rotated with half-split pairs (i, i + d_r/2) (V3.2's fix of 2025-11)
//   qi, ki <- H qi, H ki: the Sylvester-order Hadamard transform scaled by 128^-0.5
//   ki -> indexer cache (fp8, append_indexer_keys); qi -> quantize_indexer_query
//   with weights w = W_iw x_t [64]; logits (indexer_logits_decode); topk_indices.
// Positions: new token i of request b sits at position len_b - s_q + i.
#pragma once
#include <cstddef>
#include <cstdint>

#include "mla/indexer.hpp"
#include "mla/kv_cache.hpp"
#include "mla/rope.hpp"
#include "mla/status.hpp"
#include "mla/tensor.hpp"

namespace mla {

// The layer's dimensions. d_c and d_r are fixed by the cache formats (512, 64)
// and the indexer's heads by its cache (64 x 128); the others are free.
struct LayerConfig {
  int64_t hidden = 7168;     // dim
  int q_lora_rank = 1536;    // q latent
  int kv_lora_rank = 512;    // d_c: must be 512 (kv cache entry)
  int heads = 128;           // h_q on this GPU
  int d_nope = 128;          // qk_nope_head_dim
  int d_rope = 64;           // qk_rope_head_dim: must be 64 (kv cache entry)
  int d_v = 128;             // v_head_dim
  int index_topk = 2048;     // tokens per query with DSA
  double norm_eps = 1e-6;    // RMSNorm and the indexer's LayerNorm
  double softmax_scale = 0;  // 0: (d_nope + d_rope)^-0.5 * mscale^2 (V3.2's; 0.135234 at 192)
  RopeConfig rope = deepseek_v3_rope();
};

// DeepSeek-V3.2's attention layer, all 128 heads.
LayerConfig deepseek_v32_layer();
// A small layer for tests: hidden 256, 8 heads, q latent 64, d_nope = d_v = 32,
// the fixed d_c 512 / d_r 64 and the 64 x 128 indexer, top-k 64.
LayerConfig small_test_layer();

// The softmax scale the layer uses (config.softmax_scale, or V3.2's rule when 0).
double layer_softmax_scale(const LayerConfig& config);

// Weights, Linear layout [out, in], all on one device (dtypes: see layer_forward).
struct LayerWeights {
  TensorView wq_a;     // [q_lora_rank, hidden]
  TensorView q_norm;   // [q_lora_rank]
  TensorView wq_b;     // [heads * (d_nope + d_rope), q_lora_rank]
  TensorView wkv_a;    // [kv_lora_rank + d_rope, hidden]
  TensorView kv_norm;  // [kv_lora_rank]
  TensorView w_uk;     // [heads, d_nope, kv_lora_rank]  (wkv_b's key half)
  TensorView w_uv;     // [heads, d_v, kv_lora_rank]     (wkv_b's value half)
  TensorView wo;       // [hidden, heads * d_v]
  // Lightning indexer (needed for the sparse path and whenever index_cache is given).
  TensorView idx_wq_b;      // [64 * 128, q_lora_rank]
  TensorView idx_wk;        // [128, hidden]
  TensorView idx_k_norm_w;  // [128]
  TensorView idx_k_norm_b;  // [128]
  TensorView idx_w_proj;    // [64, hidden]
};

// The shape of each weight of `config`, in LayerWeights' order (13 of them).
struct LayerWeightShape {
  const char* name;
  int ndim;
  int64_t shape[3];
};
inline constexpr int kLayerWeightCount = 13;
Status layer_weight_shapes(const LayerConfig& config,
                           LayerWeightShape (&shapes)[kLayerWeightCount]);
// The view of weight i (same order) inside `w`.
TensorView& layer_weight(LayerWeights& w, int i);
const TensorView& layer_weight(const LayerWeights& w, int i);

// Fills every weight with seeded synthetic values (no checkpoint): a Linear
// [out, in] uniform in +-sqrt(3 / in) (unit-variance outputs for unit-variance
// inputs, so activations stay O(1) through the layer), norm weights
// 1 + U(-0.1, 0.1), LayerNorm bias U(-0.1, 0.1). Deterministic in `seed` and
// independent of the dtype (values drawn in double, then rounded). CPU only.
Status init_layer_weights(const LayerConfig& config, uint64_t seed, const LayerWeights& weights);

enum class LayerAttention : int32_t {
  absorbed = 0,      // MQA form over the latent cache (decode)
  non_absorbed = 1,  // decompressed MHA form (prefill)
  sparse = 2,        // DSA: indexer + top-k + sparse absorbed attention
};
const char* layer_attention_name(LayerAttention a) noexcept;

// One forward step for B requests with s_q new tokens each:
//   hidden        [B, s_q, hidden]
//   kv            paged latent cache (bf16 or fp8_ds_mla); the new tokens are
//                 written at positions len - s_q .. len - 1
//   index_cache   paged indexer cache (pages of 64 tokens); required for sparse,
//                 and written whenever given (so later sparse steps find keys)
//   block_table   [B, max_pages] i32; cache_seqlens [B] i32 (new tokens included,
//                 each >= s_q)
//   out           [B, s_q, hidden]
// With sparse attention the latent cache's page size must be 64 (the indexer's
// slots and the latent slots are the same numbers).
struct LayerForwardArgs {
  LayerConfig config;
  LayerWeights weights;
  TensorView hidden;
  KvCacheView kv;
  IndexerCacheView index_cache;
  TensorView block_table;
  TensorView cache_seqlens;
  LayerAttention attention = LayerAttention::absorbed;
  TensorView out;
};
// CPU: hidden, out and weights f32/f64/bf16, computed by the fp64 reference.
// CUDA: hidden bf16, out bf16/f32, matrix weights bf16 and norm weights (1-D)
// f32, all contiguous; absorbed or sparse attention (non_absorbed answers
// unsupported); h_q as the CUDA decode / sparse kernels take it. The GPU path
// needs `ws` of layer_workspace_size bytes (0 on CPU).
Status layer_workspace_size(const LayerForwardArgs& args, size_t* bytes);
Status layer_forward(const LayerForwardArgs& args, Workspace ws = {}, const ExecContext& ctx = {});

}  // namespace mla
