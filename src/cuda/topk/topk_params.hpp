// Kernel-level interface of the token top-k (mla/topk.hpp): POD params, the
// kernels of the family, and the one function that chooses among them.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "mla/status.hpp"

namespace mla::cuda::topk {

// The semantics of mla/topk.hpp (the CPU reference defines them): candidates
// of row r are the positions p < len_r (len_r = lengths ? lengths[r] clamped to
// [0, width] : width) whose logit is neither -inf nor NaN; the k best by
// descending logit, ties lower position first, are written to out[r][0..k),
// best first or in ascending position, translated to global cache slots
// block_table[r / rows_per_request][p / page_size] * page_size + p % page_size
// when block_table is given; -1 pads rows with fewer than k candidates.
struct TopkParams {
  const float* logits = nullptr;
  int64_t logits_stride = 0;  // elements between rows
  int64_t num_rows = 0;
  int64_t width = 0;
  int k = 2048;
  const int32_t* lengths = nullptr;
  const int32_t* block_table = nullptr;
  int64_t block_table_stride = 0;
  // Columns of block_table: a selected position past max_pages * page_size (a
  // length the host cannot check) has no slot and is written as -1, never
  // read past the row.
  int64_t max_pages = INT64_MAX;
  int page_size = 64;
  int rows_per_request = 1;
  int32_t* out = nullptr;
  int64_t out_stride = 0;
  bool best_first = true;  // false: the same set in ascending position
  // One CTA per row: finish with the rank finish (linear bins, each entry
  // ranked inside its bin; topk_kernel.cuh's rank_finish) where its bins are
  // small, else (and with a cluster) with the select path (digit rounds,
  // compaction, radix sort). A plan choice (TopkPlan::tail), not a semantic.
  bool rank_tail = true;
  // The streaming tiles: read a segment with the sieve (a sampled bound, no
  // barrier while reading; topk_sieve.cuh) where its sample says the
  // candidates fit, else with the chunk loop. A plan choice (TopkPlan::sieve).
  bool sieve = true;
};

// Two kernels. The streaming threshold select (topk_kernel.cuh) in three
// tiles reads rows of any length; the resident select (topk_resident.cuh)
// holds a row, or a cluster rank's segment of it, of at most kResidentFloats
// logits in shared memory. A cluster of `cluster` CTAs may share one row.
enum class Kernel {
  select_1024,   // 1024 threads, 1 CTA per SM, k up to 8192
  select_512,    // 512 threads, 2 CTAs per SM, k up to 4096
  select_256,    // 256 threads, 4 CTAs per SM, k up to 2048
  resident_512,  // 512 threads, 1 CTA per SM (persistent), k up to 2048
};
inline constexpr Kernel kKernels[] = {Kernel::select_1024, Kernel::select_512, Kernel::select_256,
                                      Kernel::resident_512};
inline const char* kernel_name(Kernel k) {
  switch (k) {
    case Kernel::select_1024: return "select_1024";
    case Kernel::select_512: return "select_512";
    case Kernel::select_256: return "select_256";
    case Kernel::resident_512: return "resident_512";
  }
  return "?";
}
// The largest k a kernel takes (its shared-memory buffers are sized for it).
constexpr int max_k(Kernel k) {
  return k == Kernel::select_512                                ? 4096
         : k == Kernel::select_256 || k == Kernel::resident_512 ? 2048
                                                                : 8192;
}
constexpr int ctas_per_sm(Kernel k) {
  return k == Kernel::select_512 ? 2 : k == Kernel::select_256 ? 4 : 1;
}

// The resident kernel's segment capacity: logits per CTA held in shared memory.
inline constexpr int64_t kResidentFloats = 36864;
// Whether `kernel` takes rows of `width` logits split over `cluster` CTAs: a
// rank's segment (whole 16-byte vectors from the row's first 16-byte boundary,
// at most 3 logits before the row) must fit the resident kernel's capacity.
constexpr bool fits(Kernel kernel, int64_t width, int cluster) {
  if (kernel != Kernel::resident_512) return true;
  const int64_t vecs = (width + 3 + 3) / 4;
  return (vecs + cluster - 1) / cluster <= kResidentFloats / 4;
}

// How a row's selection ends (TopkParams::rank_tail): Tail::rank tries the
// rank finish first, Tail::select runs only the select path (the kernels as
// measured before 2026-12-06; kept selectable until the GPU measures both).
enum class Tail { rank, select };
inline const char* tail_name(Tail t) {
  return t == Tail::rank ? "rank" : "select";
}

struct TopkPlan {
  Kernel kernel = Kernel::select_1024;
  int cluster = 1;  // CTAs per row: 1, 2, 4 or 8
  Tail tail = Tail::rank;
  bool sieve = true;  // streaming tiles: the sieve first (false: the chunk loop alone)
};

// k up to 2048, rows that fill the GPU and a row that fits one CTA's shared
// memory: the resident kernel, one CTA per row (one read, one pass over the
// keys in shared memory per row, no compactions). A row split over a cluster
// runs the streaming kernel instead: the resident kernel's cluster merge (a
// select over the ranks' histograms through distributed shared memory, then
// the leader's sort while the other ranks wait) measured slower than a
// streaming CTA reading the whole row alone (docs/perf-log.md, top-k).
// Otherwise, many rows: the smallest streaming tile that takes k, several CTAs
// per SM, so one row's selection work overlaps other rows' reads. Fewer rows
// than CTA slots: the 1024-thread tile, and a row split over a cluster while
// that still fills more of the GPU (each CTA keeps at least 8K logits, so the
// merge of the CTAs' selections stays small against the read).
constexpr TopkPlan choose(int64_t rows, int64_t width, int k, int sm_count) {
  TopkPlan plan;
  if (k <= max_k(Kernel::resident_512) && rows >= sm_count && fits(Kernel::resident_512, width, 1))
    return TopkPlan{Kernel::resident_512, 1};
  if (k <= max_k(Kernel::select_256) && rows >= 4LL * sm_count)
    plan.kernel = Kernel::select_256;
  else if (k <= max_k(Kernel::select_512) && rows >= 2LL * sm_count)
    plan.kernel = Kernel::select_512;
  else
    plan.kernel = Kernel::select_1024;
  const int64_t slots = int64_t(sm_count) * ctas_per_sm(plan.kernel);
  while (plan.cluster < 8 && rows * plan.cluster * 2 <= slots && width / (plan.cluster * 2) >= 8192)
    plan.cluster *= 2;
  return plan;
}

// Launches `kernel` over clusters of `cluster` CTAs per row (1, 2, 4 or 8).
// The caller has checked k (a multiple of 64, at most max_k(kernel)), the
// pointers and fits(kernel, width, cluster); width and num_rows fit the grid.
Status launch_topk(const TopkParams& p, Kernel kernel, int cluster, cudaStream_t stream);

}  // namespace mla::cuda::topk
