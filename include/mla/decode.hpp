// Absorbed MLA decode over a paged latent cache (docs/design.md section 1): MQA with
// one KV head, d_qk 576, d_v 512, h_q query heads, s_q new tokens per request.
#pragma once
#include <cstddef>

#include "mla/kv_cache.hpp"
#include "mla/status.hpp"
#include "mla/tensor.hpp"

namespace mla {

// What the CUDA kernels take: h_q in {16, 32, 64, 128} and 1 <= s_q <=
// kCudaDecodeMaxSq. The s_q * h_q query rows of a request run in 64-row blocks
// over the same keys, so any s_q works (speculative drafts, small prefill
// chunks in the absorbed form); 256 bounds the scratch (partial outputs grow
// with s_q * h_q) well past the absorbed/non-absorbed crossover, where many new
// tokens are cheaper through mla/prefill.hpp. The CPU reference takes any.
inline constexpr int kCudaDecodeMaxSq = 256;

// Shapes (B requests, s_q new tokens each, h_q heads):
//   q             [B, s_q, h_q, 576]  bf16 (CUDA); bf16 or f32 (CPU)
//   kv            paged cache, bf16 or fp8_ds_mla
//   block_table   [B, max_pages] i32: page ids into kv
//   cache_seqlens [B] i32: tokens in the cache for each request, the s_q new ones included
//   out           [B, s_q, h_q, 512] bf16 or f32
//   lse           [B, h_q, s_q] f32, natural log
// Causal masking among the s_q new tokens: new token i sees the first
// len - (s_q - 1 - i) keys (FlashMLA's convention). A query that sees no key
// (len 0, or len < s_q) gets out = 0 and lse = -inf.
// B = 0 or s_q = 0: a no-op (workspace 0). out and lse may not overlap each
// other nor any input (mla/tensor.hpp).
// Non-finite values: a NaN or +-inf in a row's query, or in any cache entry
// the row attends (the first len - (s_q - 1 - i) keys of its request), leaves
// that row's out and lse without a finite answer (the reference gives NaN, or
// for some orders of infinities a finite lse with a NaN out); every other row
// is bit-identical to the run without it. Entries no row attends (past
// cache_seqlens, unused pages, page padding) never affect any output.
// Bad page ids and lengths on CUDA tensors, the contract: a page id outside
// [0, num_pages) or a length outside [0, max_pages * page_size] cannot be
// reported synchronously (the host cannot read device values), so by default
// that request's rows get out = NaN and lse = NaN, no memory outside the
// tensors is read, no error is returned, and the other requests are
// unaffected (src/api/decode_validate.hpp). To get an error instead, turn on
// the checked mode (ExecContext::check_device_values; C:
// mla_set_check_device_values; Python: mla.checked_device_values()): the
// values are checked on the host first and the call returns out_of_range
// naming the entry. CPU tensors are always checked.
struct DecodeArgs {
  TensorView q;
  KvCacheView kv;
  TensorView block_table;
  TensorView cache_seqlens;
  float softmax_scale = 0.f;
  bool causal = true;
  TensorView out;
  TensorView lse;
};

// A decode step's split schedule, made once by decode_plan (dense) or
// sparse_decode_plan (mla/sparse.hpp) from the lengths and reused by every
// later call of the step with the same lengths (one per layer), which then
// skips the schedule kernel. The schedule itself is device memory: the first
// `bytes` of the workspace given to the plan call, written by a kernel on the
// plan call's stream (no synchronisation, so it can be captured in a CUDA graph
// with the layers' calls and replayed with new lengths). It holds no
// addresses, so those bytes may be copied elsewhere (a CUDA-graph buffer) and
// `data` pointed there. This host record says what the schedule was made for;
// a call whose shapes, mode or device differ is refused (Errc::invalid_value).
// What the host cannot see: the lengths (cache_seqlens, or the sparse
// topk_length) must hold the same values at every call that uses the plan as
// at the plan call, else keys past a request's planned tiles are skipped or
// its rows come out wrong.
struct DecodePlan {
  const void* data = nullptr;  // device: the schedule (null on CPU)
  size_t bytes = 0;            // its size
  // What it was made for.
  int device = -1;  // CUDA ordinal, -1: CPU tensors
  int64_t batch = 0, s_q = 0, h_q = 0;
  int32_t num_workers = 0;  // persistent workers of the main kernel
  bool batch_invariant = false;
  bool sparse = false;  // key lists (sparse_decode) rather than pages
  int64_t topk = 0;     // sparse: the index lists' width
  // Dense: keys the block table could hold (max_pages * page_size). A call's
  // may not be smaller: a length the plan took as valid must stay in range.
  int64_t capacity = 0;
};

struct DecodeOptions {
  // Bits of a request's output do not depend on the rest of the batch: the
  // split of its keys depends only on its own length.
  bool batch_invariant = false;
  // Not null: `plan` (from decode_plan for the same shapes, mode and lengths)
  // holds the schedule, and this call reads it instead of computing one. The
  // call's workspace is still needed (decode_workspace_size) for the
  // partials; it may be the plan's own workspace (its prefix is left alone).
  const DecodePlan* plan = nullptr;
};

// Scratch bytes a call with these shapes needs (0 on CPU). Only shapes, dtypes
// and the device of `args` are read, not the data. The same size serves
// decode_plan and the calls that use its plan.
Status decode_workspace_size(const DecodeArgs& args, const DecodeOptions& opts, size_t* bytes);

Status mla_decode(const DecodeArgs& args, const DecodeOptions& opts = {}, Workspace ws = {},
                  const ExecContext& ctx = {});

// Computes the schedule of `args`' lengths into the start of `ws` (CUDA: one
// small kernel on ctx's stream; CPU: nothing, the record only) and fills
// `*plan`. q, kv, block_table and cache_seqlens are read for their shapes and
// (cache_seqlens) values; out and lse only for their shapes. opts.plan must be
// null. ws must stay alive and unmodified in [0, plan->bytes) while the plan is
// used (a later call's scratch, even in the same workspace, does not touch it).
Status decode_plan(const DecodeArgs& args, const DecodeOptions& opts, Workspace ws,
                   DecodePlan* plan, const ExecContext& ctx = {});

// --- Split-KV pieces, so GPU split strategies can be checked piece by piece ---

// Attention of every query over keys [kv_begin[b], kv_end[b]) only (the causal
// limit still applies on top). out must be f32. Empty range: out 0, lse -inf.
// No CUDA backend in any build (CPU tensors only: Errc::unsupported on CUDA);
// the CUDA decode splits its keys internally (DecodeOptions, the workspace).
struct DecodePartialArgs {
  DecodeArgs base;
  TensorView kv_begin;  // [B] i32
  TensorView kv_end;    // [B] i32
};
Status mla_decode_partial(const DecodePartialArgs& args, const ExecContext& ctx = {});

// Merge S partial results by log-sum-exp:
//   partial_out [S, R, D] f32, partial_lse [S, R] f32  ->  out [R, D] (f32/bf16), lse [R] f32.
// Rows whose partials are all -inf get out 0 and lse -inf. A NaN or +inf
// partial lse, or a non-finite partial out whose lse is not -inf, makes the
// row's out and lse NaN; a partial with lse -inf contributes nothing whatever
// its out holds. No CUDA backend (CPU tensors only), like mla_decode_partial.
struct MergeArgs {
  TensorView partial_out;
  TensorView partial_lse;
  TensorView out;
  TensorView lse;
};
Status merge_attn_partials(const MergeArgs& args, const ExecContext& ctx = {});

}  // namespace mla
