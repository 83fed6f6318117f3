// Kernel-level interface of the token top-k (raw pointers, POD params).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "mla/status.hpp"

namespace mla::cuda::dsa {

// Row r of `logits` offers positions [begin_r, end_r):
//   begin_r = row_begin ? row_begin[r] : 0
//   end_r   = row_end ? row_end[r]
//           : seqlens ? seqlens[r / s_q] - (s_q - 1 - r % s_q)   (decode rows [B, s_q])
//           : width
// The k largest logits are chosen; equal logits are taken lower position first.
// out[r][0..k) receives the chosen positions in ascending position order,
// translated to global cache slots block_table[b][p / page_size] * page_size +
// p % page_size (b = r / s_q) when block_table is given, then -1 when the row
// offers fewer than k positions.
struct TopkParams {
  const float* logits = nullptr;
  int64_t logits_stride = 0;  // elements between rows
  int64_t num_rows = 0;
  int64_t width = 0;
  int k = 2048;
  const int32_t* row_begin = nullptr;
  const int32_t* row_end = nullptr;
  const int32_t* seqlens = nullptr;
  int s_q = 1;
  const int32_t* block_table = nullptr;
  int64_t block_table_stride = 0;
  int page_size = 64;
  int32_t* out = nullptr;
  int64_t out_stride = 0;
  // Rows to split across a cluster of this many CTAs (1, 2, 4 or 8); 0 chooses
  // from the row count and length (a long row is split when rows are few).
  int cluster = 0;
};
Status launch_topk(const TopkParams& p, cudaStream_t stream);

}  // namespace mla::cuda::dsa
