// Kernel-level interface of the token top-k (raw pointers, POD params).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "mla/status.hpp"

namespace mla::cuda::dsa {

// The semantics of mla/topk.hpp (the CPU reference defines them): candidates
// of row r are the positions p < len_r (len_r = lengths ? lengths[r] : width)
// whose logit is neither -inf nor NaN; the k best by descending logit, ties
// lower position first, are written to out[r][0..k) in that order, translated
// to global cache slots block_table[r / rows_per_request][p / page_size] *
// page_size + p % page_size when block_table is given; -1 pads rows with fewer
// than k candidates.
struct TopkParams {
  const float* logits = nullptr;
  int64_t logits_stride = 0;  // elements between rows
  int64_t num_rows = 0;
  int64_t width = 0;
  int k = 2048;
  const int32_t* lengths = nullptr;
  const int32_t* block_table = nullptr;
  int64_t block_table_stride = 0;
  int page_size = 64;
  int rows_per_request = 1;
  int32_t* out = nullptr;
  int64_t out_stride = 0;
  // Rows to split across a cluster of this many CTAs (1, 2, 4 or 8); 0 chooses
  // from the row count and length (a long row is split when rows are few).
  int cluster = 0;
  // Benchmark-only timing variants that stop early (their output is NOT the
  // top-k; only bench_dsa sets this, to place the time among the stages):
  // 1 = pass 1 only; 2 = pass 1 with conflict-free histogram addresses only;
  // 3 = pass 1 + digit + pass 2 only (no rounds 2-3, no sort); 0 = the real kernel.
  int timing_variant = 0;
};
Status launch_topk(const TopkParams& p, cudaStream_t stream);

}  // namespace mla::cuda::dsa
