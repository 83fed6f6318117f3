// Non-absorbed MLA (docs/design.md section 1), the form for prefilling many new
// tokens: decompress the latent cache into per-head keys and values with
// W_UK / W_UV, then causal multi-head attention with d_qk 192 = 128 nope + 64
// rope and d_v 128. It computes the same function as absorbed decode followed
// by W_UV (tests/cpu/test_mha_ref.cpp shows it).
#pragma once
#include <cstddef>
#include <cstdint>

#include "mla/kv_cache.hpp"
#include "mla/status.hpp"
#include "mla/tensor.hpp"

namespace mla {

// Per-head decompression of N latent vectors:
//   k_nope[n, h, d] = sum_c W_UK[h, d, c] c_kv[n, c]
//   v     [n, h, d] = sum_c W_UV[h, d, c] c_kv[n, c]
// Shapes (DeepSeek: d_c 512, d_nope = d_v = 128):
//   c_kv [N, d_c]; w_uk [h, d_nope, d_c]; w_uv [h, d_v, d_c]  f32 or bf16 (f64 on CPU)
//   k_nope [N, h, d_nope]; v [N, h, d_v]                       f32 or bf16 (f64 on CPU)
// The rope part of the key is not decompressed: k = [k_nope ; k_rope], with
// k_rope shared by every head (the caller broadcasts it).
struct DecompressKvArgs {
  TensorView c_kv;
  TensorView w_uk;
  TensorView w_uv;
  TensorView k_nope;
  TensorView v;
};
Status decompress_kv(const DecompressKvArgs& args, const ExecContext& ctx = {});

// Causal multi-head attention over variable-length sequences packed along the
// token dim (B sequences; sequence b owns query rows [cu_seqlens_q[b],
// cu_seqlens_q[b+1]) and key rows [cu_seqlens_k[b], cu_seqlens_k[b+1])):
//   q   [T, h, d_qk]   k [Tk, h, d_qk]   v [Tk, h, d_v]   f32/bf16 (f64 on CPU)
//   cu_seqlens_q, cu_seqlens_k  [B+1] i32, non-decreasing, starting at 0,
//                               ending at T and Tk
//   out [T, h, d_v] f32/bf16 (f64 on CPU);  lse [h, T] f32 (f64 on CPU), natural log
// Causal alignment is bottom-right: the queries of a sequence are its LAST
// len_q tokens (chunked prefill: earlier chunks are already in the keys), so
// query i (0-based within its sequence) sees keys j <= len_k - len_q + i. A
// query that sees no key (len_k < len_q) gets out 0 and lse -inf. DeepSeek
// uses d_qk 192 and d_v 128; the CPU reference takes any sizes.
// On Hopper the kernel loads whole 128-key tiles by TMA, so the last tile of a
// sequence holds the next sequence's first keys: masked (weight exactly 0),
// but 0 * Inf is NaN, so every value of v (of every sequence) must be finite.
// Non-finite values otherwise: a NaN or +-inf in a query row or in a key or
// value the row sees leaves that row's out and lse without a finite answer
// (CPU reference: rows that do not see it are unaffected). T = 0 is a no-op.
struct MhaPrefillArgs {
  TensorView q;
  TensorView k;
  TensorView v;
  TensorView cu_seqlens_q;
  TensorView cu_seqlens_k;
  float softmax_scale = 0.f;
  bool causal = true;
  TensorView out;
  TensorView lse;
};
Status mha_prefill(const MhaPrefillArgs& args, const ExecContext& ctx = {});

// Chunked prefill of one request over its paged latent cache (CUDA only): the T new
// tokens, already appended to the cache (append_kv: they are its last T tokens), attend
// causally to the request's whole cache of `seqlen` tokens. The cache is read in chunks of
// `chunk_size` tokens; each chunk is decompressed with w_uk / w_uv (as decompress_kv) and
// attended (as mha_prefill, with the causal alignment of the whole sequence), and the
// chunks' results are merged by log-sum-exp: the answer of attending to everything at
// once, with scratch bounded by the chunk size instead of the context length.
//   q    [T, h, 192] bf16 (128 nope + 64 rope), 16-byte aligned
//   cache  bf16 or fp8_ds_mla (mla/kv_cache.hpp), 16-byte aligned
//   block_table [max_pages] i32: the request's page ids, covering `seqlen` tokens
//   w_uk, w_uv [h, 128, 512] bf16, dense
//   out  [T, h, 128] bf16;  lse [h, T] f32 (natural log), optional
// seqlen >= T; chunk_size >= 1. The loop bounds come from the host value `seqlen`, so the
// call reads nothing back from the device. Every tensor must be on CUDA: the CPU
// reference of the same attention is decompress_kv of the gathered latents followed by
// mha_prefill (CPU tensors are rejected as Errc::unsupported).
struct ChunkedPrefillArgs {
  TensorView q;
  KvCacheView cache;
  TensorView block_table;
  int64_t seqlen = 0;  // tokens in the cache for this request, the T new ones included
  TensorView w_uk;
  TensorView w_uv;
  float softmax_scale = 0.f;
  int64_t chunk_size = 8192;  // cache tokens per decompressed chunk
  TensorView out;
  TensorView lse;
};
// The device workspace chunked_prefill needs for these arguments (validated).
Status chunked_prefill_workspace_size(const ChunkedPrefillArgs& args, size_t* bytes);
Status chunked_prefill(const ChunkedPrefillArgs& args, Workspace ws, const ExecContext& ctx = {});

}  // namespace mla
