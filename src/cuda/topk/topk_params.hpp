// Kernel-level interface of the token top-k (mla/topk.hpp): POD params, the
// kernels of the family, and the one function that chooses among them.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

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
  // The sieve's L2 prefetch ahead of its loads (topk_sieve.cuh); a plan
  // choice (TopkPlan::l2_prefetch: choose() turns it on where it measured faster).
  bool l2_prefetch = true;
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
// Threads per CTA and candidate-buffer entries of a kernel's tile
// (topk_common.cuh checks its tiles against these).
constexpr int threads_of(Kernel k) {
  return k == Kernel::select_1024 ? 1024 : k == Kernel::select_256 ? 256 : 512;
}
constexpr int buffer_cap(Kernel k) {
  return k == Kernel::select_1024  ? 16384
         : k == Kernel::select_512 ? 8192
         : k == Kernel::select_256 ? 4096
                                   : 6144;
}

// The sieve (topk_sieve.cuh) on a segment of n logits, for a tile of `threads`
// threads, a buffer of `cap` entries and a gather room of `cap2`: it samples
// `samples` logits (kSieveSampleVecs vectors per thread) and bounds the
// segment at the sample's m-th best, m the expected count of samples at or
// above the segment's k-th best plus 4 standard deviations and 4; `expect`
// entries are expected to enter. It takes the segment when that is at most
// half of each warp's slice (cap / warps) and 0.8 of cap2, and the segment
// holds at least 8k logits. Integer arithmetic: the device and choose() agree.
inline constexpr int kSieveSampleVecs = 2;
struct SievePlan {
  uint32_t samples, m;
  uint64_t expect;
  bool takes;
};
// floor(sqrt(x)). Every warp of a sieving CTA evaluates sieve_plan at run
// time: there a float square root and one correction each way give the same
// value as the 16 digit steps (float(x) and sqrtf land within one of the root).
constexpr uint32_t isqrt32(uint32_t x) {
#ifdef __CUDA_ARCH__
  if (!std::is_constant_evaluated()) {
    uint32_t r = uint32_t(sqrtf(float(x)));
    if (uint64_t(r) * r > x) --r;
    if (uint64_t(r + 1u) * (r + 1u) <= x) ++r;
    return r;
  }
#endif
  uint32_t r = 0;
  for (uint32_t bit = 1u << 30; bit != 0; bit >>= 2) {
    if (x >= r + bit) {
      x -= r + bit;
      r = (r >> 1) + bit;
    } else {
      r >>= 1;
    }
  }
  return r;
}
constexpr SievePlan sieve_plan(int threads, int cap, int cap2, int64_t n, int k) {
  SievePlan sp{};
  sp.samples = uint32_t(4 * kSieveSampleVecs * threads);
  const uint64_t nn = n > 0 ? uint64_t(n) : 1u;
  // k * samples / n in 32 bits when both fit (always, for the tiles' k and
  // samples): the same quotient without a 64-bit division on the device.
  const uint64_t ks = uint64_t(k) * sp.samples;
  const uint32_t mean = (ks | nn) >> 32 == 0 ? uint32_t(ks) / uint32_t(nn) : uint32_t(ks / nn);
  sp.m = mean + 4u * isqrt32(mean) + 4u;
  sp.expect = uint64_t(sp.m) * nn / sp.samples;
  const uint64_t warps = uint64_t(threads / 32), slice = uint64_t(cap) / warps;
  sp.takes = nn >= 8u * uint64_t(k) && sp.m <= sp.samples / 4u && sp.expect <= slice / 2u * warps &&
             5u * sp.expect <= 4u * uint64_t(cap2);
  return sp;
}
// Whether the sieve takes rows of `width` logits split over `cluster` CTAs.
constexpr bool sieve_takes(Kernel kernel, int64_t width, int cluster, int k) {
  return kernel != Kernel::resident_512 &&
         sieve_plan(threads_of(kernel), buffer_cap(kernel), max_k(kernel),
                    (width + cluster - 1) / cluster, k)
             .takes;
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

struct TopkPlan {
  Kernel kernel = Kernel::select_1024;
  int cluster = 1;          // CTAs per row: 1, 2, 4 or 8
  bool l2_prefetch = true;  // the sieve prefetches its range into L2 ahead of its loads
};

// A row is split over a cluster only from kSplitFrom logits, into segments of
// at least kSplitSegment, and over at most 4 CTAs once more than 8 rows share
// the GPU (H100, 2026-12-06, `mla_bench_dsa topk-short`, k 2048, 1-128 rows of
// 4K-256K): rows of 16K-64K ran 1.1-2.4x slower split than on one CTA (a split's
// merge is a fixed cost a short read does not hide); 1-8 rows of 128K were
// fastest on 4 CTAs (24 us; 25 on one, 27 on 8); 16 rows of 128K-256K ran
// 1.5-1.7x slower on 8 CTAs than on 4 (16 clusters of 8 do not fit at once).
inline constexpr int64_t kSplitFrom = 131072;
inline constexpr int64_t kSplitSegment = 32768;

// Rows that fill the GPU and that the sieve takes: rows up to 64K logits (two
// per SM at least) on the 512-thread tile, two CTAs per SM (one row's sample
// and finish overlap the other's read; measured 1.4x the 1024-thread tile and
// 1.6x the resident kernel at 4096 x 32K), longer rows on the 1024-thread tile
// (1.15x the 512-thread one at 4096 x 128K: the stream dominates). Else k up
// to 2048, rows that fill the GPU and a row that
// fits one CTA's shared memory: the resident kernel, one CTA per row (one read,
// one pass over the keys in shared memory per row, no compactions). A row split over a cluster
// runs the streaming kernel instead: the resident kernel's cluster merge (a
// select over the ranks' histograms through distributed shared memory, then
// the leader's sort while the other ranks wait) measured slower than a
// streaming CTA reading the whole row alone (docs/perf-log.md, top-k).
// Otherwise, many rows: the smallest streaming tile that takes k, several CTAs
// per SM, so one row's selection work overlaps other rows' reads. Fewer rows
// than CTA slots: the 1024-thread tile, and a row of at least kSplitFrom logits
// split over a cluster while that still fills more of the GPU and each CTA
// keeps at least kSplitSegment logits (so the merge of the CTAs' selections
// stays small against the read).
constexpr TopkPlan kernel_and_cluster(int64_t rows, int64_t width, int k, int sm_count) {
  if (k <= max_k(Kernel::select_512) && rows >= 2LL * sm_count && width <= 65536 &&
      sieve_takes(Kernel::select_512, width, 1, k))
    return TopkPlan{Kernel::select_512, 1};
  if (rows >= sm_count && width > 65536 && sieve_takes(Kernel::select_1024, width, 1, k))
    return TopkPlan{Kernel::select_1024, 1};
  if (k <= max_k(Kernel::resident_512) && rows >= sm_count && fits(Kernel::resident_512, width, 1))
    return TopkPlan{Kernel::resident_512, 1};
  // Fewer rows than SMs that the sieve does not take (shorter than 8k) but one
  // CTA holds: the resident kernel too (B 4-128 x 8K, k 2048, H100: 12-13 us
  // against 18-21 for a streaming CTA's select).
  if (k <= max_k(Kernel::resident_512) && fits(Kernel::resident_512, width, 1) &&
      !sieve_takes(Kernel::select_1024, width, 1, k))
    return TopkPlan{Kernel::resident_512, 1};
  TopkPlan plan;
  if (k <= max_k(Kernel::select_256) && rows >= 4LL * sm_count)
    plan.kernel = Kernel::select_256;
  else if (k <= max_k(Kernel::select_512) && rows >= 2LL * sm_count)
    plan.kernel = Kernel::select_512;
  else
    plan.kernel = Kernel::select_1024;
  const int64_t slots = int64_t(sm_count) * ctas_per_sm(plan.kernel);
  const int max_cluster = rows <= 8 ? 8 : 4;
  while (width >= kSplitFrom && plan.cluster < max_cluster && rows * plan.cluster * 2 <= slots &&
         width / (plan.cluster * 2) >= kSplitSegment)
    plan.cluster *= 2;
  return plan;
}
// The sieve's L2 prefetch (TopkPlan::l2_prefetch) pays where a CTA streams
// several rows in turn or a row is split over a cluster, and costs where each
// CTA streams one row of its own (H100, 2026-12-06: 4096 x 32K 381 vs 421 us,
// 1 x 1M on 8 CTAs 46.2 vs 48.7 us; 128 x 128K 51.6 vs 47.2 us, 128 x 32K 24.4
// vs 23.2 us; docs/perf-log.md, top-k), except where few CTAs share the GPU
// (at most a quarter of the SMs: 1-16 rows of 32K-64K logits on one CTA each,
// 15.2-20.0 us with it against 15.9-22.7 without, topk-short 2026-12-06).
constexpr bool prefetch_pays(int64_t rows, const TopkPlan& plan, int sm_count) {
  return plan.cluster > 1 || rows > int64_t(sm_count) * ctas_per_sm(plan.kernel) ||
         4 * rows <= sm_count;
}

// The plan: the kernel and cluster above, the prefetch where it pays.
constexpr TopkPlan choose(int64_t rows, int64_t width, int k, int sm_count) {
  TopkPlan plan = kernel_and_cluster(rows, width, k, sm_count);
  plan.l2_prefetch = prefetch_pays(rows, plan, sm_count);
  return plan;
}

// Launches `kernel` over clusters of `cluster` CTAs per row (1, 2, 4 or 8).
// The caller has checked k (a multiple of 64, at most max_k(kernel)), the
// pointers and fits(kernel, width, cluster); width and num_rows fit the grid.
Status launch_topk(const TopkParams& p, Kernel kernel, int cluster, cudaStream_t stream);

}  // namespace mla::cuda::topk
