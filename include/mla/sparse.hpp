// Sparse absorbed MLA attention over index lists (DSA, docs/design.md section 1):
// each query token attends only to the cache entries its list names, chosen by
// the lightning indexer + top-k (mla/indexer.hpp, mla/topk.hpp) or by
// block-sparse selection (mla/block_sparse.hpp).
//
// Index lists, shared rules:
//  - an entry is a position into the keys (a global cache slot
//    page * page_size + offset for decode, a row of kv for prefill);
//  - -1 means "no token": skipped, never read;
//  - duplicates count as often as they appear (a plain gather, as FlashMLA
//    does): the softmax sees the key twice;
//  - order does not matter (the result is a sum);
//  - a query with no valid entry gets out = 0 and lse = -inf.
// Empty batches (B = 0, s_q = 0) are no-ops. Non-finite values follow
// mla/decode.hpp's rule with "attends" meaning "its list names": a NaN or
// +-inf in a query row or in a selected entry leaves that row's out and lse
// without a finite answer; entries no list names never matter. CUDA tensors:
// an index outside the cache is treated as -1 (not read; it cannot be
// reported synchronously).
#pragma once
#include <cstddef>

#include "mla/decode.hpp"
#include "mla/kv_cache.hpp"
#include "mla/status.hpp"
#include "mla/tensor.hpp"

namespace mla {

// Decode (FlashMLA's sparse decode shapes):
//   q            [B, s_q, h_q, 576]  bf16/f32 (f64 on CPU)
//   kv           paged cache, bf16 or fp8_ds_mla
//   indices      [B, s_q, topk] i32 global slots; each in [0, num_pages * page_size) or -1
//   topk_length  optional [B] i32 in [0, topk]: entries j >= topk_length[b] are
//                ignored (not read, not checked)
//   out          [B, s_q, h_q, 512]  bf16/f32 (f64 on CPU)
//   lse          [B, h_q, s_q]       f32 (f64 on CPU), natural log
// There is no causal mask here: the index list is the mask.
struct SparseDecodeArgs {
  TensorView q;
  KvCacheView kv;
  TensorView indices;
  TensorView topk_length;
  float softmax_scale = 0.f;
  TensorView out;
  TensorView lse;
  // Not null: the schedule made by sparse_decode_plan for the same shapes and
  // topk_length values (mla/decode.hpp DecodePlan); the call skips computing it.
  const DecodePlan* plan = nullptr;
};
// CUDA: q and out bf16, lse f32, h_q a multiple of 16, B * s_q <= 65535.
// Index values and topk_length live on the GPU and are not checked on the
// host: entries outside the cache are skipped (never read), topk_length is
// clamped to [0, topk]. The CPU path checks them and answers out_of_range.
Status sparse_decode(const SparseDecodeArgs& args, Workspace ws = {}, const ExecContext& ctx = {});
// The schedule of a sparse decode step (its per-token key counts come from
// topk_length, or topk) into the start of ws, for every layer's sparse_decode
// with args.plan = plan (mla/decode.hpp DecodePlan: what may change between
// the calls, what must not). ws: sparse_workspace_size bytes. CPU tensors: the
// record only. CUDA calls that run another kernel than the split decode kernel
// (index lists whose [B, s_q] dims do not flatten) get Errc::unsupported.
Status sparse_decode_plan(const SparseDecodeArgs& args, Workspace ws, DecodePlan* plan,
                          const ExecContext& ctx = {});

// Prefill over a flat key array (FlashMLA's sparse prefill shapes, one KV head):
//   q        [s_q, h_q, 576]  bf16/f32 (f64 on CPU)
//   kv       kv_format bf16: [s_kv, 576] bf16/f32 (f64 on CPU): key rows, value =
//            the first 512; fp8_ds_mla: [s_kv, 656] u8 entries (mla/kv_cache.hpp's
//            layout), each read as its dequantised 576 values (prefill over a
//            cached fp8 prefix)
//   indices  [s_q, topk] i32, rows of kv in [0, s_kv) or -1
//   topk_length optional [s_q] i32 in [0, topk]: entries j >= topk_length[i]
//            of token i are ignored (not read, not checked)
//   out      [s_q, h_q, 512], lse [s_q, h_q]
// A prompt chunk whose queries select among a cached prefix and the chunk's
// own keys is this call with kv = the prefix rows followed by the chunk's.
struct SparsePrefillArgs {
  TensorView q;
  TensorView kv;
  TensorView indices;
  KvFormat kv_format = KvFormat::bf16;
  TensorView topk_length;
  float softmax_scale = 0.f;
  TensorView out;
  TensorView lse;
};
// CUDA: q, kv (bf16 format) and out bf16, lse f32, h_q a multiple of 16; indices
// as for decode.
Status sparse_prefill(const SparsePrefillArgs& args, Workspace ws = {},
                      const ExecContext& ctx = {});

// Scratch bytes a sparse_decode / sparse_prefill call with these shapes needs
// in `ws` (0 on CPU; on CUDA, when the queries alone do not fill the GPU, each
// index list is split over several CTAs whose partial results live there).
// Only shapes, dtypes, strides and the device of `args` are read, not the data.
// A call given fewer bytes answers Errc::insufficient_workspace.
Status sparse_workspace_size(const SparseDecodeArgs& args, size_t* bytes);
Status sparse_workspace_size(const SparsePrefillArgs& args, size_t* bytes);

}  // namespace mla
