// Token top-k with the row held in shared memory (Kernel::resident_512), for
// rows (or a cluster rank's segment of a row) of up to kResidentFloats logits.
// A persistent CTA (or cluster) takes rows r, r + clusters, ...:
//
//   prefetch the next row's segment goes to L2 (a bulk prefetch, a hint with
//            no completion to wait for), so its read overlaps this row's
//            selection.
//   load     the segment is read once (16-byte loads, kUnroll in flight per
//            thread) into shared memory as keys (topk_key), and the top
//            11 bits of every candidate's key are counted in a shared
//            histogram (atomics: counts, whose sum does not depend on order).
//   cut      the bin holding the k-th best key; when that bin and the ones
//            above hold more than kCap entries (ties, a narrow range), more
//            digits (11, 10 bits) are counted over the keys under the
//            prefix, down to an exact tie cut (select_cut's rule).
//   compact  the entries the cut keeps (at most kCap) go to key/pos in
//            ascending position, at slots from prefix sums: once per row.
//   finish   topk_kernel.cuh's finish_row: the exact k best of those (over
//            the cluster when the row is split), best first or by position.
//
// No per-chunk barrier and no compaction while reading: a row costs one read,
// one pass over its keys in shared memory, and a select over at most kCap
// entries. Every hand-over is behind a CTA or cluster barrier; nothing in
// shared memory is written asynchronously (the prefetch only warms L2).
#pragma once
#include "cuda/topk/topk_kernel.cuh"

namespace mla::cuda::topk {

// Where the resident keys start in dynamic shared memory (16-byte aligned),
// and the kernel's whole dynamic shared memory.
template <class T>
constexpr size_t resident_offset() {
  return (sizeof(Smem<T>) + 15) & ~size_t(15);
}
template <class T>
constexpr size_t resident_smem_bytes() {
  return resident_offset<T>() + size_t(kResidentFloats) * 4;
}
static_assert(resident_smem_bytes<TileOf<Kernel::resident_512>::type>() <= 227 * 1024,
              "the resident tile's buffers and kResidentFloats keys fit one SM's shared memory");

// Reads the segment's vectors [v0, v1) into rk[0 .. v1 - v0) as keys and
// counts the candidates' top-11-bit digits in s.hist (cleared by the caller,
// with a barrier after). Returns this thread's count of candidates.
template <class T>
__device__ uint32_t load_and_count(Smem<T>& s, uint4* rk, const Segment& g) {
  constexpr int kUnroll = 8;
  static_assert(T::kDigitBits == 11, "the load counts the keys' top 11 bits");
  const uint32_t nv = g.v1 - g.v0;
  uint32_t candidates = 0;
#pragma unroll 1
  for (uint32_t base = threadIdx.x; base < nv; base += kUnroll * T::kThreads) {
    float4 x[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) x[u] = load_vec(g, g.v0 + base + uint32_t(u) * T::kThreads);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const uint32_t i = base + uint32_t(u) * T::kThreads;
      if (i >= nv) break;
      const uint4 key =
          make_uint4(topk_key(x[u].x), topk_key(x[u].y), topk_key(x[u].z), topk_key(x[u].w));
      rk[i] = key;
      // Key 0 (-inf, NaN, outside the row) is no candidate and is not counted.
      if (key.x) count_digit(s.hist, key.x >> 21), ++candidates;
      if (key.y) count_digit(s.hist, key.y >> 21), ++candidates;
      if (key.z) count_digit(s.hist, key.z >> 21), ++candidates;
      if (key.w) count_digit(s.hist, key.w >> 21), ++candidates;
    }
  }
  return candidates;
}

// The cut over the resident keys rk[0..nv) (total candidates `total`), with
// the first digit's histogram already in s.hist: keeps at least k entries (or
// all candidates) and at most `limit`. select_cut's rounds, with the digits
// from the key's top bit (candidate keys are >= 0x00800000, so the first bin
// is never 0 and later prefixes never match key 0).
template <class T>
__device__ Cut resident_cut(Smem<T>& s, const uint4* rk, uint32_t nv, uint32_t total, uint32_t k,
                            uint32_t limit) {
  if (total <= limit) return Cut{0u, 0u, total, 0u};
  uint32_t prefix = 0, prefix_mask = 0, above = 0;
  int width = 32;
  bool counted = true;  // the first digit was counted by the load
#pragma unroll 1
  while (width > 0) {
    const int bits = min(width, T::kDigitBits), shift = width - bits, bins = 1 << bits;
    if (!counted) {
      for (int i = threadIdx.x; i < bins; i += T::kThreads) s.hist[i] = 0u;
      __syncthreads();
#pragma unroll 2
      for (uint32_t i = threadIdx.x; i < nv; i += T::kThreads) {
        const uint4 q = rk[i];
        const uint32_t key[4] = {q.x, q.y, q.z, q.w};
        // The prefix holds the first digit's bin (never 0): key 0 never matches.
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if ((key[e] & prefix_mask) == prefix)
            count_digit(s.hist, (key[e] >> shift) & uint32_t(bins - 1));
      }
      __syncthreads();
    }
    counted = false;
    find_bin<T>(s, bins, above, k, 1);
    Cut cut;
    if (take_bin(s, shift, bins, limit, prefix, prefix_mask, above, width, &cut)) return cut;
  }
  return Cut{prefix, k - above, k, prefix};
}

// Writes the resident entries the cut keeps (key > thr, and the first `need`
// with key == thr, in position order) to key/pos[0..kept), in ascending
// position; positions are pos0 + 4 * i + e for key e of vector i. Warp w takes
// a contiguous range of vectors, one per lane at a time, so lane order then
// element order is position order. A lane's slot comes from four ballots (one
// per element) and their popcounts below the lane: no shuffle chain per
// vector, so a warp's iterations overlap. Ends with a barrier.
template <class T>
__device__ uint32_t compact_resident(Smem<T>& s, const uint4* rk, uint32_t nv, uint32_t pos0,
                                     uint32_t thr, uint32_t need) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint32_t lt = lanemask_lt();
  const uint32_t per = ((nv + T::kWarps - 1) / T::kWarps + 31u) & ~31u;
  const uint32_t b0 = min(nv, warp * per), b1 = min(nv, b0 + per);
  uint32_t gt = 0, eq = 0;
#pragma unroll 4
  for (uint32_t i = b0 + lane; i < b1; i += 32) {
    const uint4 q = rk[i];
    gt += (q.x > thr) + (q.y > thr) + (q.z > thr) + (q.w > thr);
    eq += (q.x == thr) + (q.y == thr) + (q.z == thr) + (q.w == thr);
  }
  gt = __reduce_add_sync(0xffffffffu, gt), eq = __reduce_add_sync(0xffffffffu, eq);
  uint32_t eq_before, out;
  const uint32_t kept = warp_offsets(s, gt, eq, need, eq_before, out);
#pragma unroll 2
  for (uint32_t base = b0; base < b1; base += 32) {  // uniform over the warp
    const uint32_t i = base + lane;
    const uint4 q = i < b1 ? rk[i] : make_uint4(0u, 0u, 0u, 0u);  // key 0 is never kept
    const uint32_t key[4] = {q.x, q.y, q.z, q.w};
    bool keep[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) keep[j] = key[j] > thr;
    if (need > 0u) {  // uniform over the CTA: the cut ended on a tie key
      uint32_t eb[4], below = 0, all = 0;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        eb[j] = __ballot_sync(0xffffffffu, key[j] == thr);
        below += __popc(eb[j] & lt), all += __popc(eb[j]);
      }
      uint32_t tie = eq_before + below;  // ties before this lane's first key
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const bool is_tie = key[j] == thr;
        keep[j] = keep[j] || (is_tie && tie < need);
        tie += is_tie;
      }
      eq_before += all;
    }
    uint32_t below;
    const uint32_t all_kept = ballot_slots4(keep, lt, &below);
    uint32_t o = out + below;
    out += all_kept;
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (keep[j]) s.key[o] = key[j], s.pos[o] = pos0 + 4u * i + uint32_t(j), ++o;
  }
  __syncthreads();
  return kept;
}

template <class T>
__global__ void __launch_bounds__(T::kThreads, 1) resident_kernel(const TopkParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem<T>& s = *reinterpret_cast<Smem<T>*>(smem_raw);
  uint4* rk = reinterpret_cast<uint4*>(smem_raw + resident_offset<T>());
  cg::cluster_group cluster = cg::this_cluster();
  const int cs = int(cluster.num_blocks()), rank = int(cluster.block_rank());
  const int64_t clusters = gridDim.x / cs;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const uint32_t k = uint32_t(p.k);

  // Every rank of a cluster takes the same rows, so cluster barriers match.
#pragma unroll 1
  for (int64_t row = blockIdx.x / cs; row < p.num_rows; row += clusters) {
    const Segment g = segment_of(p, row, cs, rank);
    if (threadIdx.x == 0 && row + clusters < p.num_rows)
      prefetch_segment_l2(segment_of(p, row + clusters, cs, rank));
    for (int i = threadIdx.x; i < T::kBins; i += T::kThreads) s.hist[i] = 0u;
    __syncthreads();
    uint32_t candidates = load_and_count<T>(s, rk, g);
    candidates = __reduce_add_sync(0xffffffffu, candidates);
    // chunk_count (unused here) and not warp_a/b: the cut may return with no
    // barrier, and the compaction then writes warp_a/b.
    if (lane == 0) s.chunk_count[0][warp] = candidates;
    __syncthreads();  // keys, histogram and the warps' counts complete
    const uint32_t total =
        __reduce_add_sync(0xffffffffu, lane < T::kWarps ? s.chunk_count[0][lane] : 0u);
    const uint32_t nv = g.v1 - g.v0;
    // The cut keeps at most kCap entries, with the k best among them.
    const Cut cut = resident_cut<T>(s, rk, nv, total, k, uint32_t(T::kCap));
    const uint32_t pos0 = 4u * g.v0 - uint32_t(g.mis);  // wraps for vector 0 of a shifted row:
    // its entries before the row are key 0, never kept
    const uint32_t fill = compact_resident<T>(s, rk, nv, pos0, cut.thr, cut.need);
    // The resident keys are free once compacted: the rank finish's scratch.
    uint32_t* tk = reinterpret_cast<uint32_t*>(rk);
    constexpr uint32_t kHalf = uint32_t(kResidentFloats / 2);
    finish_row<T>(s, fill, p, row, RankScratch{tk, tk + kHalf, kHalf}, NoProbe{});
    // The next row rewrites hist, rk and (ranks) the leader's buffers.
    sync_scope(cs > 1);
  }
}

}  // namespace mla::cuda::topk
