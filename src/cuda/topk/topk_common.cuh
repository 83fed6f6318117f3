// Pieces the top-k kernels share (topk_kernel.cuh, topk_resident.cuh,
// topk_rank.cuh, topk_sieve.cuh): the tiles and their shared memory, the
// order-preserving key, CTA scans, the radix select over a buffer
// (select_cut) and its compaction, the radix sort, the output and the
// segment a CTA reads.
#pragma once
#include <cooperative_groups.h>

#include <cstdint>

#include "cuda/topk/topk_params.hpp"

namespace mla::cuda::topk {

namespace cg = cooperative_groups;

// A tile of the kernel: threads, CTAs per SM, logits per thread per chunk
// (kVecs float4), chunks in flight per thread (kDepth: registers), the buffer
// (kCap entries) and the compaction target (kCap2 entries, the largest k).
template <int Threads, int CtasPerSm, int Depth, int Cap, int Cap2, int DigitBits = 11>
struct Tile {
  static constexpr int kThreads = Threads;
  static constexpr int kCtasPerSm = CtasPerSm;
  static constexpr int kWarps = Threads / 32;
  static constexpr int kVecs = 2;
  static constexpr int kDepth = Depth;
  static constexpr int kChunk = Threads * 4 * kVecs;
  static constexpr int kCap = Cap;
  static constexpr int kCap2 = Cap2;
  static constexpr int kDigitBits = DigitBits;  // select histograms: 2^kDigitBits bins
  static constexpr int kBins = 1 << DigitBits;
  static_assert(kBins >= kThreads && kBins % kThreads == 0,
                "each thread owns a whole number (>= 1) of bins in the select's scan");
  static_assert(kWarps <= 32, "the warps' counts are scanned by one warp");
  static_assert(kCap >= kCap2 + kChunk,
                "after a compaction (<= kCap2 entries) a whole chunk must fit the buffer");
  static_assert(kCap - kCap2 >= kWarps * 256,
                "the sort's counts (256 per warp) fit in key[kCap2..kCap), past the k entries");
};
// Tile for `kernel` (one place: the launch and the static checks below read it).
template <Kernel K>
struct TileOf;
template <>
struct TileOf<Kernel::select_1024> {
  using type = Tile<1024, 1, 2, 16384, 8192>;
};
template <>
struct TileOf<Kernel::select_512> {
  using type = Tile<512, 2, 2, 8192, 4096>;
};
template <>
struct TileOf<Kernel::select_256> {
  using type = Tile<256, 4, 2, 4096, 2048, 10>;
};
template <>
struct TileOf<Kernel::resident_512> {
  using type = Tile<512, 1, 2, 6144, 2048>;
};
template <Kernel K>
constexpr bool tile_matches() {
  using T = typename TileOf<K>::type;
  return T::kCap2 == max_k(K) && T::kCtasPerSm == ctas_per_sm(K) && T::kThreads == threads_of(K) &&
         T::kCap == buffer_cap(K);
}
static_assert(tile_matches<Kernel::select_1024>() && tile_matches<Kernel::select_512>() &&
                  tile_matches<Kernel::select_256>() && tile_matches<Kernel::resident_512>(),
              "a kernel takes k up to its compaction target, at the occupancy and sizes choose() "
              "assumes");

template <class T>
struct Smem {
  uint32_t key[T::kCap];
  uint32_t pos[T::kCap];
  // Compaction target; after the last compaction, where the cluster's leader
  // gathers the CTAs' entries, and the sort's second buffer.
  uint32_t key2[T::kCap2];
  uint32_t pos2[T::kCap2];
  uint32_t hist[T::kBins];
  uint32_t chunk_count[2][32];  // warps' entries in a chunk (by parity of the exchange)
  uint32_t warp_a[32], warp_b[32];
  uint32_t found_bin, found_above, found_count, total;
  uint32_t rank_gt, rank_eq;            // this CTA's entries above / at the cluster's threshold
  uint32_t rank_n, rank_lo, rank_hi;    // this CTA's entries, their min and max key
  uint32_t kth_key, kth_pos, kth_need;  // topk_rank.cuh: the k-th best entry, its tie count
};

// Order-preserving map float -> uint32: a larger logit has a larger key, -0
// and +0 share one key (they compare equal), and -inf and every NaN map to 0,
// below every candidate (key > 0 for every candidate, so a bound of 0 admits
// exactly the candidates).
__device__ __forceinline__ uint32_t topk_key(float f) {
  uint32_t u = __float_as_uint(f);
  if (u == 0x80000000u) u = 0u;
  const uint32_t key = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  // -inf -> 0x007fffff; negative NaNs below it, positive NaNs above +inf's 0xff800000.
  return (key <= 0x007fffffu || key > 0xff800000u) ? 0u : key;
}

// The float f_B with (f > f_B) == (topk_key(f) > B) for every float f, for a
// bound B that is 0 or a candidate's key (>= 0x00800000, <= +inf's key): the
// stream compares raw logits and maps only the entering ones to keys. f > f_B
// is false for NaN, as topk_key(NaN) = 0 is never above a bound.
__device__ __forceinline__ float key_bound_as_float(uint32_t b) {
  if (b == 0u) return -INFINITY;  // every candidate: not -inf, not NaN
  // Keys just below +0's (0x80000000) belong to -0 and the negative denormals;
  // -0 shares +0's key, so "above 0x7fffffff" means ">= -0": above the
  // smallest negative denormal.
  if (b == 0x7fffffffu) return __uint_as_float(0x80000001u);
  return __uint_as_float((b & 0x80000000u) ? (b & 0x7fffffffu) : ~b);
}

__device__ __forceinline__ uint32_t lanemask_lt() {
  uint32_t m;
  asm("mov.u32 %0, %%lanemask_lt;" : "=r"(m));
  return m;
}

__device__ __forceinline__ uint32_t warp_inclusive_sum(uint32_t v) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const uint32_t o = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v += o;
  }
  return v;
}

// The warp's slots for one 16-byte vector per lane, four entries each, kept
// where keep[e]: in lane order, then element order (position order for
// consecutive vectors). Returns the entries the warp keeps; *below gets those
// of lower lanes (this lane's first slot past the caller's base). Every lane
// of the warp must call it.
__device__ __forceinline__ uint32_t ballot_slots4(const bool keep[4], uint32_t lt,
                                                  uint32_t* below) {
  uint32_t b = 0, all = 0;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const uint32_t m = __ballot_sync(0xffffffffu, keep[e]);
    b += __popc(m & lt), all += __popc(m);
  }
  *below = b;
  return all;
}

// Exclusive prefix over the CTA's threads of v (thread order); *total gets the
// sum. One barrier; `scratch` (kWarps words) must not be read by anyone else
// until the caller's next barrier.
template <class T>
__device__ __forceinline__ uint32_t block_exclusive_sum(uint32_t v, uint32_t* scratch,
                                                        uint32_t* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint32_t incl = warp_inclusive_sum(v);
  if (lane == 31) scratch[warp] = incl;
  __syncthreads();
  const uint32_t w = lane < T::kWarps ? scratch[lane] : 0u;
  const uint32_t wincl = warp_inclusive_sum(w);
  *total = __shfl_sync(0xffffffffu, wincl, T::kWarps - 1);
  return __shfl_sync(0xffffffffu, wincl - w, warp) + incl - v;
}

// Which entries a compaction keeps: key > thr, and the first `need` entries
// (in buffer order: lowest positions) with key == thr. `bound` is the new
// entry bound, `kept` how many entries are kept (over the cluster for a
// cluster-wide select).
struct Cut {
  uint32_t thr, need, kept, bound;
};

// Counts one key in a shared histogram. An increment by one compiles to
// ATOMS.POPC.INC, which adds the number of the instruction's lanes that hit
// the same word: lanes on one bin (ties, a narrow range) cost one update, so
// no match.any grouping (a long-latency instruction on every key) is needed.
__device__ __forceinline__ void count_digit(uint32_t* hist, uint32_t bin) {
  atomicAdd(&hist[bin], 1u);
}

// Barrier over the CTA, or over the cluster when the data crosses CTAs.
__device__ __forceinline__ void sync_scope(bool cluster_wide) {
  if (cluster_wide)
    cg::this_cluster().sync();
  else
    __syncthreads();
}

// The bin of hist[0..bins) (one digit's counts; summed over the cluster's
// ranks when cs > 1) holding the k-th largest entry, counting `above` entries
// that lie above every bin: sets s.found_bin, s.found_above (entries above
// that bin) and s.found_count. Requires above < k <= above + the bins' sum and
// a barrier after the counts were made; reads hist before its first barrier
// (so the caller may clear it after this returns) and ends with a barrier.
template <class T>
__device__ void find_bin(Smem<T>& s, int bins, uint32_t above, uint32_t k, int cs) {
  // Thread t owns kPer bins, from the top: thread 0 the highest.
  constexpr int kPer = T::kBins / T::kThreads;
  const int top = bins - 1 - int(threadIdx.x) * kPer;
  uint32_t c[kPer];
  uint32_t sum = 0;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    c[j] = 0u;
    if (top - j >= 0) {
      if (cs > 1) {
        for (int q = 0; q < cs; ++q) c[j] += cg::this_cluster().map_shared_rank(s.hist, q)[top - j];
      } else {
        c[j] = s.hist[top - j];
      }
    }
    sum += c[j];
  }
  uint32_t in_prefix;
  const uint32_t before = above + block_exclusive_sum<T>(sum, s.warp_a, &in_prefix);
  if (before < k && before + sum >= k) {
    uint32_t acc = before;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      if (acc + c[j] >= k) {
        s.found_bin = uint32_t(top - j), s.found_above = acc, s.found_count = c[j];
        break;
      }
      acc += c[j];
    }
  }
  __syncthreads();
}

// One digit round's end, after find_bin on the digit at `shift`: true with
// *cut set when the found bin and everything above it fit `limit` (the cut
// ends there), else the candidates narrow to the found bin (prefix, mask,
// the count above it, and the bits still to resolve).
template <class T>
__device__ __forceinline__ bool take_bin(const Smem<T>& s, int shift, int bins, uint32_t limit,
                                         uint32_t& prefix, uint32_t& prefix_mask, uint32_t& above,
                                         int& width, Cut* cut) {
  const uint32_t low = prefix | (s.found_bin << shift);
  const uint32_t f_above = s.found_above, f_count = s.found_count;
  if (f_above + f_count <= limit) {
    *cut = Cut{low - 1u, 0u, f_above + f_count, low};
    return true;
  }
  above = f_above;
  prefix = low;
  prefix_mask |= uint32_t(bins - 1) << shift;
  width = shift;
  return false;
}

// Radix select over the buffers' first n entries: this CTA's alone, or the
// cluster's (histograms summed over the ranks) when cluster_wide. Returns the
// cut that keeps at least k entries (or all, when there are at most `limit`)
// and at most `limit` (limit >= k), stopping at the first digit round that
// gets there; when the digits run out, ties are cut to exactly k. The digits
// start below the bits all keys share (from their min and max), so the first
// round spreads a buffer whose keys sit in a narrow range (after compactions,
// all of them) over up to 2048 bins instead of a few contended ones. Starts
// and ends with the CTA's buffer stable (callers' barriers); uses hist,
// warp_a/b, found_*, total and (cluster) rank_*.
template <class T>
__device__ Cut select_cut(Smem<T>& s, uint32_t n, uint32_t k, uint32_t limit, bool cluster_wide) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int cs = cluster_wide ? int(cg::this_cluster().num_blocks()) : 1;
  // Count, min and max of the keys (of the cluster's, through each rank's).
  uint32_t lo = 0xffffffffu, hi = 0u;
#pragma unroll 4
  for (uint32_t i = tid; i < n; i += T::kThreads) lo = min(lo, s.key[i]), hi = max(hi, s.key[i]);
  lo = __reduce_min_sync(0xffffffffu, lo), hi = __reduce_max_sync(0xffffffffu, hi);
  if (lane == 0) s.warp_a[warp] = lo, s.warp_b[warp] = hi;
  __syncthreads();
  lo = __reduce_min_sync(0xffffffffu, lane < T::kWarps ? s.warp_a[lane] : 0xffffffffu);
  hi = __reduce_max_sync(0xffffffffu, lane < T::kWarps ? s.warp_b[lane] : 0u);
  uint32_t total = n;
  if (cluster_wide) {
    cg::cluster_group cluster = cg::this_cluster();
    if (tid == 0) s.rank_n = n, s.rank_lo = lo, s.rank_hi = hi;
    cluster.sync();
    total = 0;
    for (int q = 0; q < cs; ++q) {
      total += *cluster.map_shared_rank(&s.rank_n, q);
      lo = min(lo, *cluster.map_shared_rank(&s.rank_lo, q));
      hi = max(hi, *cluster.map_shared_rank(&s.rank_hi, q));
    }
  }
  if (total <= limit) {  // every candidate fits
    __syncthreads();     // warp_a/b read by every warp before anyone writes them again
    return Cut{0u, 0u, total, 0u};
  }
  // Bits [0, width) vary among the keys; the ones above are the common prefix.
  int width = lo == hi ? 0 : 32 - __clz(lo ^ hi);
  uint32_t prefix_mask = width == 32 ? 0u : ~((1u << width) - 1u);
  uint32_t prefix = lo & prefix_mask, above = 0;
#pragma unroll 1
  while (width > 0) {
    const int bits = min(width, T::kDigitBits), shift = width - bits, bins = 1 << bits;
    // Other ranks may still read this CTA's hist (or rank_*) of the previous
    // step; this CTA's own readers passed the barrier after the scan.
    if (cluster_wide) cg::this_cluster().sync();
    for (int i = tid; i < bins; i += T::kThreads) s.hist[i] = 0u;
    __syncthreads();
#pragma unroll 4
    for (uint32_t i = tid; i < n; i += T::kThreads) {
      const uint32_t key = s.key[i];
      if ((key & prefix_mask) == prefix) count_digit(s.hist, (key >> shift) & uint32_t(bins - 1));
    }
    sync_scope(cluster_wide);
    find_bin<T>(s, bins, above, k, cs);
    Cut cut;
    if (take_bin(s, shift, bins, limit, prefix, prefix_mask, above, width, &cut)) return cut;
  }
  // All candidates equal (width 0 from the start: the loop, whose first barrier
  // orders the reads of warp_a/b above, never ran): every warp must be past
  // those reads before the caller's warp_offsets writes them (racecheck,
  // 2026-12-06). Uniform: lo, hi and width are the same in every thread.
  __syncthreads();
  return Cut{prefix, k - above, k, prefix};
}

// The CTA's scan of per-warp counts (gt above the threshold, eq tied with
// it; equal in every lane of a warp): returns how many entries the cut keeps
// (every gt, the first `need` ties), and for this warp the ties in earlier
// warps and the slot of its first kept entry. One barrier between the writes of
// warp_a/b and their reads (the caller orders their next writes).
template <class T>
__device__ __forceinline__ uint32_t warp_offsets(Smem<T>& s, uint32_t gt, uint32_t eq,
                                                 uint32_t need, uint32_t& eq_before,
                                                 uint32_t& out) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) s.warp_a[warp] = gt, s.warp_b[warp] = eq;
  __syncthreads();
  const uint32_t g = lane < T::kWarps ? s.warp_a[lane] : 0u;
  const uint32_t e = lane < T::kWarps ? s.warp_b[lane] : 0u;
  const uint32_t gi = warp_inclusive_sum(g), ei = warp_inclusive_sum(e);
  eq_before = __shfl_sync(0xffffffffu, ei - e, warp);
  out = __shfl_sync(0xffffffffu, gi - g, warp) + min(eq_before, need);
  return __shfl_sync(0xffffffffu, gi, T::kWarps - 1) +
         min(__shfl_sync(0xffffffffu, ei, T::kWarps - 1), need);
}

// Keeps, in order, the entries of key[0..n) that cut (thr, need) keeps; returns
// their count. Warp w takes a contiguous range of entries, 32 at a time, so the
// order of the kept ones is the buffer's. Ends with a barrier.
template <class T>
__device__ uint32_t compact(Smem<T>& s, uint32_t n, uint32_t thr, uint32_t need) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint32_t per = ((n + T::kWarps - 1) / T::kWarps + 31u) & ~31u;
  const uint32_t b0 = min(n, warp * per), b1 = min(n, b0 + per);
  uint32_t gt = 0, eq = 0;
#pragma unroll 4
  for (uint32_t base = b0; base < b1; base += 32) {
    const uint32_t i = base + lane;
    const uint32_t key = i < b1 ? s.key[i] : 0u;
    gt += __popc(__ballot_sync(0xffffffffu, i < b1 && key > thr));
    eq += __popc(__ballot_sync(0xffffffffu, i < b1 && key == thr));
  }
  uint32_t eq_before, out;
  const uint32_t kept = warp_offsets(s, gt, eq, need, eq_before, out);
  const uint32_t lt = lanemask_lt();
#pragma unroll 4
  for (uint32_t base = b0; base < b1; base += 32) {
    const uint32_t i = base + lane;
    const bool in = i < b1;
    const uint32_t key = in ? s.key[i] : 0u;
    const uint32_t eb = __ballot_sync(0xffffffffu, in && key == thr);
    const bool keep = in && (key > thr || (key == thr && eq_before + __popc(eb & lt) < need));
    const uint32_t kb = __ballot_sync(0xffffffffu, keep);
    if (keep) {
      const uint32_t o = out + __popc(kb & lt);
      s.key2[o] = key, s.pos2[o] = s.pos[i];
    }
    out += __popc(kb);
    eq_before += __popc(eb);
  }
  __syncthreads();
#pragma unroll 4
  for (uint32_t i = threadIdx.x; i < kept; i += T::kThreads)
    s.key[i] = s.key2[i], s.pos[i] = s.pos2[i];
  __syncthreads();
  return kept;
}

// The position's output value: itself, or its global cache slot.
__device__ __forceinline__ int32_t output_value(const TopkParams& p, int64_t row, uint32_t pos) {
  if (p.block_table == nullptr) return int32_t(pos);
  // 32-bit quotient (row < 2^31: rows fit the grid; rows_per_request >= 1): the
  // compiler hoists it out of the callers' loops, taken or not.
  const uint32_t request = uint32_t(row) / uint32_t(p.rows_per_request);
  const int32_t* bt = p.block_table + int64_t(request) * p.block_table_stride;
  const uint32_t page = pos / uint32_t(p.page_size);
  if (page >= p.max_pages) return -1;  // past the row: no slot (mla/topk.hpp)
  return bt[page] * p.page_size + int32_t(pos % uint32_t(p.page_size));
}

// The lanes of the warp whose value v (below 2^Bits) equals this lane's, as
// __match_any_sync(0xffffffff, v) gives them, from one ballot per bit: short
// votes that issue back to back instead of match.any's long latency.
// Every lane of the warp must call it.
template <int Bits>
__device__ __forceinline__ uint32_t match_bits(uint32_t v) {
  uint32_t peers = 0xffffffffu;
#pragma unroll
  for (int b = 0; b < Bits; ++b) {
    const bool set = (v >> b) & 1u;
    const uint32_t m = __ballot_sync(0xffffffffu, set);
    peers &= set ? m : ~m;
  }
  return peers;
}

// Stable LSD radix sort of n <= kCap2 (key, position) pairs, in position order,
// by descending key: 8-bit digits (inverted, so larger keys come first),
// skipping the digits every key shares. A pass ranks each entry among the
// entries of its warp's range with the same digit (match_bits, a running count
// per warp and digit), scans the counts digit-major, and scatters; stable, so
// ties keep ascending position. Ping-pongs between (k0, p0) and (k1, p1);
// `table` holds kWarps * 256 counts. Returns 0 or 1: the buffer holding the
// result. Starts after a barrier that makes (k0, p0) complete.
template <class T>
__device__ int radix_sort_desc(uint32_t* k0, uint32_t* p0, uint32_t* k1, uint32_t* p1,
                               uint32_t* table, uint32_t n, uint32_t* scratch_a,
                               uint32_t* scratch_b) {
  constexpr int W = T::kWarps, kRounds = T::kCap2 / (32 * W), kPer = 256 * W / T::kThreads;
  static_assert(kRounds * 32 * W >= T::kCap2 && kPer * T::kThreads == 256 * W,
                "every entry has a round; every count a thread");
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const uint32_t lt = lanemask_lt();
  // Which digits vary: the bits where the keys' AND and OR differ.
  uint32_t a = 0xffffffffu, o = 0u;
#pragma unroll 4
  for (uint32_t i = tid; i < n; i += T::kThreads) a &= k0[i], o |= k0[i];
  a = __reduce_and_sync(0xffffffffu, a), o = __reduce_or_sync(0xffffffffu, o);
  if (lane == 0) scratch_a[warp] = a, scratch_b[warp] = o;
  __syncthreads();
  a = __reduce_and_sync(0xffffffffu, lane < W ? scratch_a[lane] : 0xffffffffu);
  o = __reduce_or_sync(0xffffffffu, lane < W ? scratch_b[lane] : 0u);
  const uint32_t varying = a ^ o;
  const uint32_t per = ((n + W - 1) / W + 31u) & ~31u;  // this warp's range: [warp * per, +per)
  const uint32_t b0 = warp * per;
  int cur = 0;
#pragma unroll 1
  for (int shift = 0; shift < 32; shift += 8) {
    if (((varying >> shift) & 0xffu) == 0u) continue;  // uniform over the CTA
    const uint32_t* sk = cur ? k1 : k0;
    const uint32_t* sp = cur ? p1 : p0;
    uint32_t* dk = cur ? k0 : k1;
    uint32_t* dp = cur ? p0 : p1;
    for (int i = tid; i < 256 * W; i += T::kThreads) table[i] = 0u;
    __syncthreads();
    uint32_t rank[kRounds];
#pragma unroll
    for (int r = 0; r < kRounds; ++r) {
      if (uint32_t(r) * 32u >= per) break;  // the same for every warp
      const uint32_t i = b0 + uint32_t(r) * 32u + lane;
      const bool in = i < n;
      const uint32_t d = in ? 255u - ((sk[i] >> shift) & 0xffu) : 256u;
      const uint32_t peers = match_bits<9>(d);
      const int leader = __ffs(peers) - 1;
      uint32_t base = 0;
      if (in && lane == leader) {
        base = table[warp * 256 + d];
        table[warp * 256 + d] = base + uint32_t(__popc(peers));
      }
      rank[r] = __shfl_sync(0xffffffffu, base, leader) + uint32_t(__popc(peers & lt));
      __syncwarp();
    }
    __syncthreads();
    // Exclusive offsets, digit-major: count (d, w) sits at table[w * 256 + d].
    uint32_t c[kPer], sum = 0;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int l = tid * kPer + j;
      c[j] = table[(l % W) * 256 + l / W];
      sum += c[j];
    }
    uint32_t total;
    uint32_t off = block_exclusive_sum<T>(sum, scratch_a, &total);
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int l = tid * kPer + j;
      table[(l % W) * 256 + l / W] = off;
      off += c[j];
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kRounds; ++r) {
      if (uint32_t(r) * 32u >= per) break;
      const uint32_t i = b0 + uint32_t(r) * 32u + lane;
      if (i < n) {
        const uint32_t key = sk[i];
        const uint32_t o2 = table[warp * 256 + (255u - ((key >> shift) & 0xffu))] + rank[r];
        dk[o2] = key, dp[o2] = sp[i];
      }
    }
    __syncthreads();
    cur ^= 1;
  }
  return cur;
}

// Writes the row's k outputs from positions pos[0..n) (-1 past n).
template <class T>
__device__ void write_row(const uint32_t* pos, uint32_t n, const TopkParams& p, int64_t row) {
  int32_t* out = p.out + row * p.out_stride;
  for (int j = threadIdx.x; j < p.k; j += T::kThreads)
    out[j] = uint32_t(j) < n ? output_value(p, row, pos[j]) : -1;
}

// Best first: sorts (k0, p0)[0..n) by descending key (ties in their position
// order) and writes the row. (k1, p1) and the count table are scratch.
template <class T>
__device__ void sort_and_write(Smem<T>& s, uint32_t* k0, uint32_t* p0, uint32_t* k1, uint32_t* p1,
                               uint32_t n, const TopkParams& p, int64_t row) {
  __syncthreads();  // (k0, p0) complete
  const int which = radix_sort_desc<T>(k0, p0, k1, p1, s.key + T::kCap2, n, s.warp_a, s.warp_b);
  write_row<T>(which ? p1 : p0, n, p, row);
}

// Where this CTA's logits are: the row, its valid length, and the segment
// [v0, v1) of 16-byte vectors, counted from the row's first 16-byte boundary
// at or below its start (`mis` floats before it), that this rank reads.
// Vectors [vf0, vf1) lie wholly inside [0, len). 32-bit counts: the API keeps
// rows below 2^31 logits.
struct Segment {
  const float* row;
  const float4* vec;  // row - mis: vector v is vec[v]
  int len, mis;
  uint32_t v0, v1, vf0, vf1;
};

// The logits of vector v (positions 4v - mis .. 4v + 3 - mis); positions
// outside [0, len) read as -inf (never entered).
__device__ __forceinline__ float4 load_vec(const Segment& g, uint32_t v) {
  if (v >= g.v1) return make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
  if (v >= g.vf0 && v < g.vf1) return __ldg(g.vec + v);
  const int p0 = int(4 * v) - g.mis;
  float f[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) f[e] = (p0 + e >= 0 && p0 + e < g.len) ? g.row[p0 + e] : -INFINITY;
  return make_float4(f[0], f[1], f[2], f[3]);
}

// Warms L2 with the segment's vectors [a, b) that lie wholly inside the row
// (so the prefetch never touches memory outside it): bulk prefetches, hints
// with no completion to wait for and no registers or load slots held. One
// thread calls it.
__device__ __forceinline__ void prefetch_vecs_l2(const Segment& g, uint32_t a, uint32_t b) {
  a = max(a, g.vf0), b = min(b, g.vf1);
  if (a >= b) return;
  size_t addr = __cvta_generic_to_global(g.vec + a);
  uint32_t bytes = (b - a) * 16u;
  while (bytes > 0) {
    const uint32_t n = min(bytes, 32768u);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(addr), "r"(n) : "memory");
    addr += n, bytes -= n;
  }
}
__device__ __forceinline__ void prefetch_segment_l2(const Segment& g) {
  prefetch_vecs_l2(g, g.v0, g.v1);
}

// Rank `rank` of `cs`'s segment of `row`: the vectors [v0, v1) of an even
// split of the row's valid length.
__device__ __forceinline__ Segment segment_of(const TopkParams& p, int64_t row, int cs, int rank) {
  Segment g;
  g.row = p.logits + row * p.logits_stride;
  g.len = int(p.width);
  if (p.lengths != nullptr) g.len = min(max(p.lengths[row], 0), int(p.width));
  g.mis = int((reinterpret_cast<uintptr_t>(g.row) >> 2) & 3);
  g.vec = reinterpret_cast<const float4*>(g.row - g.mis);
  const uint32_t nvec = (uint32_t(g.len) + uint32_t(g.mis) + 3u) / 4u;
  const uint32_t per_rank = (nvec + cs - 1) / cs;
  g.v0 = min(nvec, uint32_t(rank) * per_rank);
  g.v1 = min(nvec, g.v0 + per_rank);
  g.vf0 = g.mis > 0 ? 1u : 0u;
  g.vf1 = uint32_t(g.len + g.mis) / 4;
  return g;
}

}  // namespace mla::cuda::topk
