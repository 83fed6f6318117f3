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
  // 3 (default) = the sampled single-pass kernel (a threshold from 2048 samples of the
  // row, every key above it collected in the one streaming pass, the leader
  // selects and sorts); 2 = the two-pass streaming kernel (bulk copies, one
  // cluster digit round, the leader sorts the pool); 1 = the three-pass kernel
  // (kept for comparison, and run by 2 and 3 on rows their pools cannot take);
  // 4 = 3 with each warp appending to its own slice of the pool (no shared
  // counter, no atomic in the pass; not yet measured). See topk.cu.
  // 1 is the default: compute-sanitizer racecheck reported hazards in the
  // streaming kernel (2, 3) on the H200 (2026-11-29). Analysis (helper dsa3):
  // the distributed-shared-memory write at v3's counts exchange came before
  // any cluster barrier, a real defect (a CTA's shared memory may be touched
  // only once it is known to run): fixed, the wait of a split cluster barrier
  // arrived at after init now precedes it (as v2's). The bulk-copy writes
  // against ring reads are ordered by the ring's empty/full mbarriers (a
  // stage is re-issued only after all 16 warps arrived on its empty barrier
  // after reading it; no parity aliasing, as no warp can lag a full ring
  // behind the issuing thread), the protocol of TMA pipelines, which we read
  // as the tool not modelling mbarrier completion of the async proxy. The
  // default stays 1 until a racecheck run with the fix is read and 2-4
  // measure faster inside the DSA step (docs/perf-log.md "Top-k v2").
  int algo = 1;
  // Benchmark-only timing variants (only bench_dsa sets this, to place the
  // time among the stages); 0 = the real kernel. Those that stop early do NOT
  // write the top-k. algo 1: 1 = pass 1 only; 2 = pass 1 with conflict-free
  // histogram addresses only; 3 = pass 1 + digit + pass 2 only (no rounds 2-3,
  // no sort). algo 2: 1 = pass 1 only; 3 = up to the end of pass 2 (no sort);
  // 4 = the whole kernel with pass 2 in forward order; 5 = the whole kernel
  // with L2 hints (pass 1 evict-last, pass 2 evict-first) (4 and 5 write the
  // top-k); 6 = pass 1's copies only (no histogram); 7 = up to the digit
  // exchange (no pass 2); 8 = the whole kernel, the pool sorted in shared
  // memory (the first v2's sort; writes the top-k). algo 3: 1 = sample and
  // the pass only; 3 = up to the leader's pool (no selection, no sort); 8 =
  // the pool sorted in shared memory; 9 = the leader always rank 0 (8 and 9
  // write the top-k). algo 4: as algo 3.
  int timing_variant = 0;
};
Status launch_topk(const TopkParams& p, cudaStream_t stream);

}  // namespace mla::cuda::dsa
