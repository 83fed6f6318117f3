// The whole DeepSeek Sparse Attention decode step as one operation (docs/design.md
// section 1, docs/dsa.md): lightning-indexer logits over the paged indexer
// cache -> token top-k (global cache slots) -> sparse absorbed attention, or
// plain dense decode when the batch is short enough that DSA cannot pay off.
//
// It only composes the public ops (mla/indexer.hpp, mla/topk.hpp,
// mla/sparse.hpp, mla/decode.hpp): CPU tensors run their CPU references, CUDA
// tensors their kernels, on the caller's stream, with every intermediate
// (logits, index lists, the ops' own scratch) carved from the one workspace.
#pragma once
#include <cstddef>
#include <cstdint>

#include "mla/decode.hpp"
#include "mla/indexer.hpp"
#include "mla/kv_cache.hpp"
#include "mla/status.hpp"
#include "mla/tensor.hpp"

namespace mla {

// Shapes (B requests, s_q new tokens each, h_q heads):
//   q                    [B, s_q, h_q, 576]  as for mla_decode / sparse_decode
//   kv                   the paged latent cache (bf16 or fp8_ds_mla)
//   block_table          [B, max_pages] i32, pages of kv.page_size() tokens
//   cache_seqlens        [B] i32, the s_q new tokens included
//   index_q8             [B, s_q, 64, 128] e4m3  } the indexer's queries, already
//   index_w_folded       [B, s_q, 64] f32        } quantised (quantize_indexer_query)
//   index_cache          the paged indexer key cache (pages of 64 tokens)
//   index_block_table    [B, max_index_pages] i32, pages of 64 tokens; may be left
//                        undefined when kv.page_size() is 64 and both caches share
//                        block_table (the usual layout: one page id, two pools)
//   out                  [B, s_q, h_q, 512], lse [B, h_q, s_q]
//
// The indexer queries come in quantised: the engine computes them in its own
// projection and quantize_indexer_query is a separate public op it can fuse or
// overlap; taking q8 here keeps the step free of that scratch and of a second
// copy of the query quantisation rule.
//
// max_seqlen: an upper bound of cache_seqlens the caller knows on the host
// (the engine's scheduler has it). The step never reads device lengths on the
// host; it sizes the logits [B, s_q, max_seqlen] with it and picks the path.
// CPU tensors: every cache_seqlens[b] <= max_seqlen is checked (out_of_range).
// CUDA tensors: it cannot be checked; a request longer than max_seqlen has its
// keys past max_seqlen never scored, so never selected, on the sparse path
// (the dense path does not use max_seqlen at all).
struct DsaDecodeArgs {
  TensorView q;
  KvCacheView kv;
  TensorView block_table;
  TensorView cache_seqlens;
  int64_t max_seqlen = -1;
  TensorView index_q8;
  TensorView index_w_folded;
  IndexerCacheView index_cache;
  TensorView index_block_table;  // optional, see above
  float softmax_scale = 0.f;
  TensorView out;
  TensorView lse;
};

enum class DsaPath : int32_t {
  automatic = 0,  // the dispatch rule below
  dense = 1,      // always mla_decode (exact only while every length <= topk)
  sparse = 2,     // always indexer -> top-k -> sparse_decode (tests, benchmarks)
};

// Dispatch rule (path == automatic): dense mla_decode when
//   max_seqlen <= max(topk, dense_below),
// else the sparse pipeline. At or below topk every visible key is selected, so
// dense attention is exact and skips the indexer; between topk and dense_below
// DSA selects but measured slower than reading everything.
// The context lengths from which the DSA step measured faster than dense decode
// on the H200 (2026-11-29, mla_bench_dsa dsa-step: B 64, 128 heads, one new
// token, top-2048, the whole step against mla_decode on the same cache, dense
// decode v8 and top-k v1; docs/dsa.md): bf16 cache 0.92x at 4096, 1.18x at
// 6144 -> 4736 (interpolated, whole pages); fp8 cache 1.00x at 3072 -> 3072.
inline constexpr int64_t kDsaDenseBelowH200Bf16 = 4736;
inline constexpr int64_t kDsaDenseBelowH200Fp8 = 3072;
// The same sweep on an H100 80GB HBM3 (2026-12-06, dense decode's one-way form, top-k's sieve):
// bf16 1.00x at 4096, 1.31x at 6144 -> 4160; fp8 0.93x at 2048, 1.12x at 3072 -> 2432. Not the
// default (the default does not read the device): an H100 deployment sets dense_below to these.
inline constexpr int64_t kDsaDenseBelowH100Bf16 = 4160;
inline constexpr int64_t kDsaDenseBelowH100Fp8 = 2432;
inline constexpr int64_t kDsaDenseBelowMeasured = -1;

struct DsaPolicy {
  int32_t topk = 2048;  // a multiple of 64 in [64, 8192] (mla/topk.hpp)
  // Context length up to which dense decode is used even above topk.
  // kDsaDenseBelowMeasured (the default): the H200 crossover measured for the
  // cache's format (above). Other GPUs, batch shapes or a calibration: set it,
  // e.g. from plan::dsa_dense_threshold() (mla/plan.hpp: the planner's prediction). 0 keeps the
  // model's exact semantics (dense only where every key is selected anyway).
  int64_t dense_below = kDsaDenseBelowMeasured;
  DsaPath path = DsaPath::automatic;
  DecodeOptions dense_options{};  // passed to mla_decode on the dense path
};

// The path dsa_decode takes for these arguments and policy (no data read).
Status dsa_decode_path(const DsaDecodeArgs& args, const DsaPolicy& policy, DsaPath* path);

// Scratch bytes dsa_decode needs (the chosen path's: on the sparse path the
// logits [B, s_q, max_seqlen] f32, the index lists [B, s_q, topk] i32, the
// per-row lengths on CPU and sparse_decode's own scratch; on the dense path
// mla_decode's). Nonzero on CPU too: the intermediates are real tensors there.
// Only shapes, dtypes, devices, max_seqlen and the policy are read.
Status dsa_decode_workspace_size(const DsaDecodeArgs& args, const DsaPolicy& policy, size_t* bytes);

// Runs the step. A workspace smaller than dsa_decode_workspace_size answers
// Errc::insufficient_workspace naming both byte counts. The workspace lives on
// q's device (host memory for CPU tensors).
Status dsa_decode(const DsaDecodeArgs& args, const DsaPolicy& policy = {}, Workspace ws = {},
                  const ExecContext& ctx = {});

}  // namespace mla
