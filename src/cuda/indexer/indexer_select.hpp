// The prefill select: the lightning indexer's logits of T query tokens over N
// flat keys (the prefill form, Kernel::flat_tma_wgmma) followed by the top-k of
// every row, the index lists of sparse prefill (docs/dsa.md, "Prefill select").
// Two paths, the same output bit for bit:
//   unfused  the logits [T, N] f32 written to the workspace, then the top-k
//            (topk::choose's plan) over them;
//   fused    the indexer kernel with the candidate sink
//            (indexer_prefill_candidates.cuh): each row keeps, in ascending
//            position, only the logits not below a running bound on its k-th
//            best, in a buffer of `capacity` entries; then the top-k over the
//            buffers (lengths = the rows' counts; buffer order is position
//            order, so its ties are the reference's) and a gather from buffer
//            index to position. A row that kept more than `capacity` entries is
//            recomputed by the unfused path, in chunks of `fallback_rows` rows:
//            the host reads the overflow count once per call (a stream
//            synchronisation; the fused path cannot be captured in a graph).
//            The [T, N] logits are never allocated.
// Semantics are those of the indexer (mla/indexer.hpp: token t sees keys
// [k_start[t], k_end[t]), -inf elsewhere) and of the top-k over its logits
// (mla/topk.hpp: descending logit, ties lower position first, NaN and -inf
// never selected, -1 past a row's candidates), positions only (no block table).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/indexer/indexer_params.hpp"
#include "mla/status.hpp"

namespace mla::cuda::indexer {

enum class SelectPath { unfused, fused };
inline const char* select_path_name(SelectPath s) {
  return s == SelectPath::fused ? "fused" : "unfused";
}

struct PrefillSelectParams {
  // The prefill form's inputs (q, w, flat_keys, flat_scales, num_keys, ks, ke,
  // num_tokens); logits, logits_stride and width are set by the select (rows of
  // num_keys positions).
  IndexerLogitsParams idx;
  int k = 2048;            // a multiple of 64 in [64, 8192]
  int32_t* out = nullptr;  // [num_tokens][out_stride] i32
  int64_t out_stride = 0;
  bool best_first = true;  // false: the same set in ascending position
};

// Candidate entries per row of the fused path, as a multiple of k, when the
// options leave it 0: 8k (16384 for k = 2048; 512 MB of buffers at 4096 rows
// against 2 GB of logits at 128K keys). Rows expected to keep about
// k (1 + ln(N / k)) entries plus the slack of the histogram's bins (a bin is
// 2^(1/4) wide) and of the bound's lag (kRefreshTiles); docs/perf-log.md.
inline constexpr int64_t kDefaultCapacityPerK = 8;
inline constexpr int64_t kDefaultFallbackRows = 128;

// The top-k over the candidate buffers: the resident kernel where it fits
// (rows >= SMs, k <= 2048, capacity <= its 36K logits per CTA), or always
// topk::choose's plan (planned for full rows of `capacity`: the bench times both).
enum class CandidateTopk { resident, choose };

struct SelectOptions {
  SelectPath path = SelectPath::unfused;
  CandidateTopk candidate_topk = CandidateTopk::resident;
  int64_t capacity = 0;       // fused: entries per row; 0: kDefaultCapacityPerK * k
  int64_t fallback_rows = 0;  // fused: rows per unfused fallback chunk; 0: the default
};

// What a call did (tests and the benchmark read it; the kept counts cost one
// more copy back, made only when stats are asked for).
struct SelectStats {
  int64_t overflow_rows = 0;  // fused: rows recomputed by the unfused path
  int64_t max_kept = 0;       // fused: the most entries a row kept (past capacity: counted on)
  int64_t total_kept = 0;     // fused: entries kept over all rows
};

// Workspace bytes of a call (256-byte aligned pieces, plus slack for any base).
size_t prefill_select_workspace(const PrefillSelectParams& p, const SelectOptions& opt);
Status prefill_select(const PrefillSelectParams& p, const SelectOptions& opt, void* workspace,
                      size_t workspace_bytes, cudaStream_t stream, SelectStats* stats = nullptr);

// The fused kernel's outputs (prefill_wgmma::CandidateSink).
struct CandidateArgs {
  float* logits = nullptr;       // [T][cap]: the kept logits of row t, in ascending position
  int32_t* pos = nullptr;        // [T][cap]: their positions
  int64_t cap = 0;               // entries per row
  int32_t* counts = nullptr;     // [T]: entries row t kept (past cap: it overflowed)
  int32_t* over_rows = nullptr;  // [T]: the rows that overflowed, in no particular order
  int32_t* over_n = nullptr;     // their number (zeroed by the launch)
  uint32_t k = 0;                // the top-k's k
};

// The pieces (indexer_prefill_fused.cu). The candidates kernel: one CTA per 8
// tokens over all of their keys (p.width = p.num_keys).
Status launch_prefill_candidates(const IndexerLogitsParams& p, const CandidateArgs& a,
                                 cudaStream_t stream);
// out[r][j] = pos[r * cap + out[r][j]] where out[r][j] >= 0 (buffer index to position).
Status launch_gather_positions(int32_t* out, int64_t out_stride, int64_t rows, int k,
                               const int32_t* pos, int64_t cap, cudaStream_t stream);
// Rows of row_bytes bytes (a multiple of 4, as the strides): gather copies src
// row list[i] to dst row i, scatter src row i to dst row list[i], i < n.
Status launch_copy_rows(void* dst, int64_t dst_stride, const void* src, int64_t src_stride,
                        int64_t row_bytes, const int32_t* list, int64_t n, bool scatter,
                        cudaStream_t stream);

}  // namespace mla::cuda::indexer
