// Token top-k over indexer logits (DSA, docs/design.md section 1): for each row the
// k best positions among [0, length), optionally translated to global cache
// slots, in the index-list format sparse attention reads (-1 = no token).
#pragma once
#include <cstdint>

#include "mla/status.hpp"
#include "mla/tensor.hpp"

namespace mla {

// k is a multiple of 64 (the sparse kernels consume index lists in 64-token
// tiles) from 64 up to 8192 (DeepSeek-V3.2 uses 2048; 4x headroom).
inline constexpr int kTopkGranule = 64;
inline constexpr int kTopkMax = 8192;

// Semantics (the CPU reference defines them; every backend must match):
//  - Candidates of row r are the positions p < lengths[r] whose score is not
//    -inf. NaN counts as -inf (never selected): a masked or broken score must
//    not pull a token into attention. +inf is a candidate (the best score;
//    ties among +inf by position). The indexer makes every logit of a key or
//    query holding a NaN NaN (mla/indexer.hpp), so such keys are never chosen.
//  - R = 0 is a no-op; N = 0 (or lengths[r] = 0) gives a row of -1.
//  - Selection: descending score, ties broken by the lower position first, so
//    the set is deterministic. Output order: best first (the first j entries
//    are the top-j) or, when the caller does not need the order, the same set
//    in ascending position (cheaper: no sort on the GPU).
//  - Rows with fewer than k candidates are padded with -1 at the end.
//  - With block_table given, each position p of row r is replaced by its global
//    cache slot block_table[b][p / page_size] * page_size + p % page_size, where
//    b = r / rows_per_request (rows of one request are contiguous: the s_q new
//    tokens of request b are rows b*s_q .. b*s_q + s_q - 1).
//  - Device values: CPU tensors have lengths and page ids checked
//    (out_of_range). On CUDA tensors (ExecContext::check_device_values checks
//    them) a selected position past block_table's row (a length past max_pages
//    * page_size) is written as -1, which sparse attention skips wherever it is.
enum class TopkOrder {
  best_first,   // descending score, ties lower position first
  by_position,  // ascending position
};

struct TopkArgs {
  TensorView logits;   // [R, N] f32
  TensorView lengths;  // [R] i32, 0 <= lengths[r] <= N; undefined: every row has N
  int32_t k = 2048;
  TensorView indices;  // out [R, k] i32: positions, or global slots
  TopkOrder order = TopkOrder::best_first;
  // Optional translation to cache slots.
  TensorView block_table;  // [B, max_pages] i32, B * rows_per_request == R
  int32_t page_size = 64;
  int32_t rows_per_request = 1;
  // When >= 0, each page id read is checked against it (CPU reference).
  int64_t num_pages = -1;
};

Status topk_indices(const TopkArgs& args, const ExecContext& ctx = {});

}  // namespace mla
