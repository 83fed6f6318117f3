// The DSA prefill select (docs/dsa.md, "Prefill select"): the lightning
// indexer's prefill logits (mla/indexer.hpp) followed by the token top-k of each
// row (mla/topk.hpp) in one call, so that a prompt's index lists for sparse
// prefill need no [T, N] logits tensor of the caller's.
#pragma once
#include <cstddef>
#include <cstdint>

#include "mla/indexer.hpp"
#include "mla/status.hpp"
#include "mla/tensor.hpp"
#include "mla/topk.hpp"

namespace mla {

// The prefill select: indexer_logits_prefill's logits followed by the top-k of
// each row (topk_indices on them, without lengths or block table), in one call:
//   q8, w_folded, k8, k_scale, k_start, k_end  as IndexerLogitsPrefillArgs
//   k          a multiple of 64 in [64, 8192] (mla/topk.hpp)
//   order      best first, or the same set in ascending position
//   indices    out [T, k] i32: positions in [0, N) (-1 past a row's candidates)
// The result is that of the two calls one after the other, bit for bit on CPU
// tensors (the CPU path runs exactly those references, the logits in a
// temporary). CUDA tensors: the index lists match the CPU's up to the CUDA
// logits' precision (near-ties, mla/indexer.hpp) and are the same bit for
// bit on both paths. A row sees at most k_end[t] - k_start[t] candidates, so a
// row shorter than k is padded with -1.
enum class IndexerSelectPath {
  // The unfused path: it measured faster than fused on an H100 (the fused path
  // took 0.80x / 0.92x the speed of the unfused pair at T = 4096 with 32K /
  // 128K keys). Choose fused for its memory, not its time.
  automatic,
  // The [T, N] f32 logits in the workspace (4 T N bytes), then the top-k.
  unfused,
  // The indexer kernel keeps, per row, only the logits that can still be among
  // the k best, in a buffer of `capacity` entries; the [T, N] logits are never
  // held (8 B an entry: 8 T capacity B of buffers, 512 MB at T = 4096 with
  // k = 2048 and the default capacity, against 2 GB of logits at 128K keys).
  // A row whose buffer overflows is recomputed by the unfused path in chunks
  // of rows. It reads one count back from the GPU: the call synchronises its
  // stream and cannot be captured into a CUDA graph.
  fused,
};
struct IndexerSelectOptions {
  IndexerSelectPath path = IndexerSelectPath::automatic;
  // fused: candidate entries per row; 0 takes 8 k. Smaller saves memory, and
  // rows that keep more are recomputed (slower, never wrong).
  int64_t capacity = 0;
};
struct IndexerSelectPrefillArgs {
  TensorView q8;
  TensorView w_folded;
  TensorView k8;
  TensorView k_scale;
  TensorView k_start;
  TensorView k_end;
  int32_t k = 2048;
  TopkOrder order = TopkOrder::best_first;
  TensorView indices;  // out
};
// Scratch bytes of a call with these shapes and options in `ws` (0 on CPU and
// for T = 0; CUDA: about 4 T N for unfused; for fused 8 T capacity plus a
// fallback chunk of min(T, 128) rows, about 512 N + 128 (8 KB + 4 k)). Only
// shapes, dtypes, strides and the device are read. A call given fewer bytes
// answers Errc::insufficient_workspace.
Status indexer_select_prefill_workspace_size(const IndexerSelectPrefillArgs& args,
                                             const IndexerSelectOptions& opts, size_t* bytes);
Status indexer_select_prefill(const IndexerSelectPrefillArgs& args,
                              const IndexerSelectOptions& opts = {}, Workspace ws = {},
                              const ExecContext& ctx = {});

}  // namespace mla
