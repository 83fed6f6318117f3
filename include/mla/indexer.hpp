// DeepSeek-V3.2's lightning indexer (docs/design.md sections 1 and 2): FP8 keys in a
// paged indexer cache, FP8 queries with their scale folded into the head
// weights, and the logits
//   I[t, s] = k_scale[s] * sum_h w'[t, h] * ReLU(q8[t, h] . k8[s])
// that token top-k (mla/topk.hpp) turns into the index lists of sparse attention.
//
// Non-finite values (every backend; the CPU reference defines the bytes):
//  - quantisation (keys and queries alike): the amax is taken over the finite
//    values of the 128-vector only; +-inf is stored saturated (+-448 * s); NaN
//    as the e4m3 NaN code, and a vector holding a NaN gets a NaN scale;
//  - so a key with a NaN has NaN logits for every query, and a query head with
//    a NaN has a NaN folded weight, so NaN logits for every key: top-k never
//    selects NaN (mla/topk.hpp), so such a key is never attended and such a
//    query selects nothing;
//  - ReLU is max(dot, 0) with a NaN dot counting 0 (the kernels' fmaxf): it is
//    the NaN scale that carries a NaN vector to its logits. A NaN code in the
//    caller's own k8 with a finite k_scale (indexer_logits_prefill) therefore
//    adds nothing, on every backend.
// Empty shapes (B, s_q, T, N or max_len 0) are no-ops.
#pragma once
#include <cstdint>

#include "mla/status.hpp"
#include "mla/tensor.hpp"

namespace mla {

inline constexpr int kIndexerHeads = 64;  // H_I
inline constexpr int kIndexerDim = 128;   // per-head dim, one scale per vector

// One page of the indexer key cache holds 64 tokens: 64 x 128 e4m3 codes
// (token-major), then 64 fp32 scales (powers of two). 8448 B, 132 B per token.
struct IndexerCacheLayout {
  static constexpr int kPageTokens = 64;
  static constexpr int kCodeBytes = kPageTokens * kIndexerDim;  // 8192
  static constexpr int kScaleOffset = kCodeBytes;
  static constexpr int kPageBytes = kCodeBytes + 4 * kPageTokens;  // 8448
};
static_assert(IndexerCacheLayout::kPageBytes == 8448, "indexer page is 8448 bytes");
static_assert(IndexerCacheLayout::kPageBytes / IndexerCacheLayout::kPageTokens == 132,
              "132 bytes per token: 128 e4m3 codes + one fp32 scale");

// data: [num_pages, 8448] u8 (or e4m3); pages may be padded (stride(0) >= 8448).
// Global slots are page * 64 + offset, as in the latent cache with page_size 64.
struct IndexerCacheView {
  TensorView data;
  int64_t num_pages() const { return data.shape[0]; }
};
Status validate_indexer_cache(const IndexerCacheView& cache, const char* name);

// Quantise and write T key tokens: keys [T, 128] f32/bf16, slots [T] i64
// (-1 skips a token). Per token: a = max(max|k|, 1e-4), s = 2^ceil(log2(a/448)),
// k8 = e4m3(clamp(k / s, -448, 448)) by round-to-nearest-even.
struct AppendIndexerKeysArgs {
  TensorView keys;
  TensorView slots;
  IndexerCacheView cache;
};
Status append_indexer_keys(const AppendIndexerKeysArgs& args, const ExecContext& ctx = {});

// Quantise queries per (token, head) as the keys above and fold the scale into
// the head weight (DeepSeek-V3.2's code):
//   w'[t, h] = w[t, h] * 64^-0.5 * s_q[t, h] * 128^-0.5
//   q        [T, 64, 128] f32/bf16   ->  q8 [T, 64, 128] e4m3
//   weights  [T, 64] f32             ->  w_folded [T, 64] f32
// Leading dims may be any (e.g. [B, s_q, 64, 128]) as long as q8/weights/w_folded match.
struct QuantizeIndexerQueryArgs {
  TensorView q;
  TensorView weights;
  TensorView q8;        // out
  TensorView w_folded;  // out
};
Status quantize_indexer_query(const QuantizeIndexerQueryArgs& args, const ExecContext& ctx = {});

// Decode logits over the paged indexer cache.
//   q8            [B, s_q, 64, 128] e4m3
//   w_folded      [B, s_q, 64] f32
//   block_table   [B, max_pages] i32 (pages of 64 tokens)
//   cache_seqlens [B] i32, the s_q new tokens included; each <= max_len
//   logits        out [B, s_q, max_len] f32
// New token i of request b sees positions [0, len - (s_q - 1 - i)); every other
// position up to max_len gets -inf. Dots are exact (fp64 over e4m3 values).
// CUDA precision: the FP8 tensor-core dot products accumulate with a
// reduced-precision adder (about 14 bits), so a CUDA logit differs from the
// exact one by at most ~2^-14 of A = k_scale * sum_h |w'| * sum_d |q8 k8| (the
// same sum by magnitude): measured on the H200 <= 1.5e-5 A, <= 3e-4 of the
// row's largest |logit| (s_q 1-4, 16K keys; python/tests/
// test_indexer_precision_gpu.py checks <= 2^-13 A). Top-k on CUDA logits may so
// order near-ties (scores within that) differently from the CPU reference.
// CPU tensors: page ids and lengths are checked (out_of_range). CUDA tensors
// (the host cannot read them; ExecContext::check_device_values checks them):
// a page id outside the cache scores 0 for each key it would hold, and a
// length past max_pages * 64 has no keys past the block table's row (-inf;
// the row is never read past its end).
struct IndexerLogitsDecodeArgs {
  TensorView q8;
  TensorView w_folded;
  IndexerCacheView cache;
  TensorView block_table;
  TensorView cache_seqlens;
  TensorView logits;
};
Status indexer_logits_decode(const IndexerLogitsDecodeArgs& args, const ExecContext& ctx = {});

// Prefill logits over a flat (ragged-batch) key array, DeepGEMM's shapes:
//   q8 [T, 64, 128] e4m3, w_folded [T, 64] f32, k8 [N, 128] e4m3, k_scale [N] f32,
//   k_start, k_end [T] i32 with 0 <= k_start <= k_end <= N,
//   logits out [T, N] f32, -inf outside [k_start[t], k_end[t]).
struct IndexerLogitsPrefillArgs {
  TensorView q8;
  TensorView w_folded;
  TensorView k8;
  TensorView k_scale;
  TensorView k_start;
  TensorView k_end;
  TensorView logits;
};
Status indexer_logits_prefill(const IndexerLogitsPrefillArgs& args, const ExecContext& ctx = {});

}  // namespace mla
