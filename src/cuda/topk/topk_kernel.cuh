// Token top-k by a streaming threshold select. One CTA (or each CTA of a
// cluster, over its contiguous segment) reads its logits once, in chunks in
// position order, and keeps in shared memory every logit that can still be
// among the k best:
//
//   stream   a logit enters the buffer when its key (topk_key) is above the
//            bound B. Entries are appended at slots from prefix sums (warp
//            ballots, then the warps' counts), never from atomics, so the
//            buffer is always in ascending position and its content does not
//            depend on timing.
//   compact  when a chunk's entries would overflow the buffer (kCap), a radix
//            select over the buffer (11, 11, 10 bits; shared-memory
//            histograms) finds a bucket holding the k-th best key; the entries
//            at or above its low end, fewer than kCap2, are kept (stable) and
//            B rises to that low end. At least k kept entries are at or above
//            B and all lie before any later logit, so a later logit at or
//            below B can never be among the k best. When ties at one key keep
//            more than kCap2 entries, the k best are kept exactly (ties by
//            lower position: the first in buffer order) and B is the k-th key.
//            After a compaction at most kCap2 entries remain and a whole chunk
//            fits: the buffer never overflows, whatever the logits.
//   finish   the same select with limit k leaves exactly the k best (or all
//            candidates, when fewer). With a cluster, the select runs over the
//            sum of the CTAs' histograms (distributed shared memory); each CTA
//            learns from the others' counts how many of its ties it keeps and
//            where its entries go (segments are in rank order, so positions
//            and ties stay ordered across CTAs).
//   output   best first: the leader sorts (key desc, position asc) in shared
//            memory (bitonic); otherwise the entries are written as they are,
//            in ascending position. Positions become cache slots on the way.
//
// Every shared-memory hand-over between threads is ordered by a CTA or cluster
// barrier; nothing is asynchronous (loads go to registers), so there is no
// protocol to race. Output slots come from prefix sums and a total order on
// (key, position), so the bits written depend only on the input.
#pragma once
#include <cooperative_groups.h>

#include <cstdint>

#include "cuda/topk/topk_params.hpp"

namespace mla::cuda::topk {

namespace cg = cooperative_groups;

// A tile of the kernel: threads, CTAs per SM, logits per thread per chunk
// (kVecs float4), chunks in flight per thread (kDepth: registers), the buffer
// (kCap entries) and the compaction target (kCap2 entries, the largest k; also
// the sort buffer of kCap2 pairs).
template <int Threads, int CtasPerSm, int Depth, int Cap, int Cap2>
struct Tile {
  static constexpr int kThreads = Threads;
  static constexpr int kCtasPerSm = CtasPerSm;
  static constexpr int kWarps = Threads / 32;
  static constexpr int kVecs = 2;
  static constexpr int kDepth = Depth;
  static constexpr int kChunk = Threads * 4 * kVecs;
  static constexpr int kCap = Cap;
  static constexpr int kCap2 = Cap2;
  static_assert(kWarps <= 32, "the warps' counts are scanned by one warp");
  static_assert(kCap >= kCap2 + kChunk,
                "after a compaction (<= kCap2 entries) a whole chunk must fit the buffer");
  static_assert((kCap2 & (kCap2 - 1)) == 0, "the bitonic sort runs on kCap2 pairs at most");
  static_assert(
      kCap >= 2 * (kCap2 > 2 * kThreads ? kCap2 : 2 * kThreads),
      "the sort's two exchange buffers (pow2(n) >= 2 * kThreads pairs each) fit in key/pos");
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
struct TileOf<Kernel::select_512_deep> {
  using type = Tile<512, 1, 6, 16384, 8192>;
};
template <Kernel K>
constexpr bool tile_matches() {
  using T = typename TileOf<K>::type;
  return T::kCap2 == max_k(K) && T::kCtasPerSm == ctas_per_sm(K);
}
static_assert(tile_matches<Kernel::select_1024>() && tile_matches<Kernel::select_512>() &&
                  tile_matches<Kernel::select_512_deep>(),
              "a kernel takes k up to its compaction target, at the occupancy choose() assumes");

constexpr int kRadixBins = 2048;  // 11 bits: rounds over bits [31:21], [20:10], [9:0]

template <class T>
struct Smem {
  uint32_t key[T::kCap];
  uint32_t pos[T::kCap];
  // Compaction target; after the last compaction, the sort buffer
  // (key << 32 | ~position pairs) of the cluster's leader.
  alignas(16) uint32_t key2[T::kCap2];
  uint32_t pos2[T::kCap2];
  uint32_t hist[kRadixBins];
  uint32_t chunk_count[2][32];  // warps' entries in a chunk (by parity of the exchange)
  uint32_t warp_a[32], warp_b[32];
  uint32_t found_bin, found_above, found_count, total;
  uint32_t rank_gt, rank_eq;  // this CTA's entries above / at the cluster's threshold
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

// Barrier over the CTA, or over the cluster when the data crosses CTAs.
__device__ __forceinline__ void sync_scope(bool cluster_wide) {
  if (cluster_wide)
    cg::this_cluster().sync();
  else
    __syncthreads();
}

// Radix select over the buffers' first n entries: this CTA's alone, or the
// cluster's (histograms summed over the ranks) when cluster_wide. Returns the
// cut that keeps at least k entries (or all, when there are at most `limit`)
// and at most `limit` (limit >= k), stopping at the first digit round that
// gets there; after the last round, ties are cut to exactly k. Starts and ends
// with the CTA's buffer stable (callers' barriers); uses hist and found_*.
template <class T>
__device__ Cut select_cut(Smem<T>& s, uint32_t n, uint32_t k, uint32_t limit, bool cluster_wide) {
  const int tid = threadIdx.x, lane = tid & 31;
  const int cs = cluster_wide ? int(cg::this_cluster().num_blocks()) : 1;
  uint32_t prefix = 0, prefix_mask = 0, above = 0;
#pragma unroll 1
  for (int round = 0; round < 3; ++round) {
    const int shift = round == 0 ? 21 : round == 1 ? 10 : 0;
    const int bins = round == 2 ? 1024 : 2048;
    // Other ranks may still read this CTA's hist of the previous round; this
    // CTA's own readers passed the barrier after the scan (or the caller's).
    if (cluster_wide) cg::this_cluster().sync();
    for (int i = tid; i < bins; i += T::kThreads) s.hist[i] = 0u;
    __syncthreads();
    const uint32_t n32 = (n + 31u) & ~31u;  // whole warps per iteration: ballots see every lane
    for (uint32_t i = tid; i < n32; i += T::kThreads) {
      const uint32_t key = i < n ? s.key[i] : 0u;
      const bool match = i < n && (key & prefix_mask) == prefix;
      const uint32_t bin = (key >> shift) & uint32_t(bins - 1);
      const uint32_t m = __ballot_sync(0xffffffffu, match);
      if (m == 0u) continue;
      const int first = __ffs(m) - 1;
      const uint32_t first_bin = __shfl_sync(0xffffffffu, bin, first);
      // One atomic per warp when its entries share a bin (ties, narrow
      // ranges): a bin hit by every lane would otherwise serialise 32 deep.
      if (__all_sync(0xffffffffu, !match || bin == first_bin)) {
        if (lane == first) atomicAdd(&s.hist[first_bin], uint32_t(__popc(m)));
      } else if (match) {
        atomicAdd(&s.hist[bin], 1u);
      }
    }
    sync_scope(cluster_wide);
    // Thread t owns `per` bins, from the top: thread 0 the highest.
    constexpr int kMaxPer = kRadixBins / T::kThreads;
    const int per = bins / T::kThreads;
    const int top = bins - 1 - tid * per;
    uint32_t c[kMaxPer > 0 ? kMaxPer : 1];
    uint32_t sum = 0;
#pragma unroll
    for (int j = 0; j < kMaxPer; ++j) {
      c[j] = 0u;
      if (j < per) {
        if (cluster_wide) {
          for (int q = 0; q < cs; ++q)
            c[j] += cg::this_cluster().map_shared_rank(s.hist, q)[top - j];
        } else {
          c[j] = s.hist[top - j];
        }
      }
      sum += c[j];
    }
    uint32_t total;
    const uint32_t before = above + block_exclusive_sum<T>(sum, s.warp_a, &total);
    if (before < k && before + sum >= k) {
      uint32_t acc = before;
#pragma unroll
      for (int j = 0; j < kMaxPer; ++j) {
        if (j < per && acc + c[j] >= k) {
          s.found_bin = uint32_t(top - j), s.found_above = acc, s.found_count = c[j];
          break;
        }
        acc += c[j];
      }
    }
    __syncthreads();
    if (round == 0 && total <= limit) return Cut{0u, 0u, total, 0u};  // every candidate fits
    const uint32_t low = prefix | (s.found_bin << shift);
    const uint32_t f_above = s.found_above, f_count = s.found_count;
    if (f_above + f_count <= limit) return Cut{low - 1u, 0u, f_above + f_count, low};
    above = f_above;
    prefix = low;
    prefix_mask |= uint32_t(bins - 1) << shift;
  }
  return Cut{prefix, k - above, k, prefix};
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
  for (uint32_t base = b0; base < b1; base += 32) {
    const uint32_t i = base + lane;
    const uint32_t key = i < b1 ? s.key[i] : 0u;
    gt += __popc(__ballot_sync(0xffffffffu, i < b1 && key > thr));
    eq += __popc(__ballot_sync(0xffffffffu, i < b1 && key == thr));
  }
  if (lane == 0) s.warp_a[warp] = gt, s.warp_b[warp] = eq;
  __syncthreads();
  const uint32_t g = lane < T::kWarps ? s.warp_a[lane] : 0u;
  const uint32_t e = lane < T::kWarps ? s.warp_b[lane] : 0u;
  const uint32_t gi = warp_inclusive_sum(g), ei = warp_inclusive_sum(e);
  const uint32_t kept = __shfl_sync(0xffffffffu, gi, T::kWarps - 1) +
                        min(__shfl_sync(0xffffffffu, ei, T::kWarps - 1), need);
  uint32_t eq_before = __shfl_sync(0xffffffffu, ei - e, warp);
  uint32_t out = __shfl_sync(0xffffffffu, gi - g, warp) + min(eq_before, need);
  const uint32_t lt = lanemask_lt();
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
  for (uint32_t i = threadIdx.x; i < kept; i += T::kThreads)
    s.key[i] = s.key2[i], s.pos[i] = s.pos2[i];
  __syncthreads();
  return kept;
}

// The position's output value: itself, or its global cache slot.
__device__ __forceinline__ int32_t output_value(const TopkParams& p, int64_t row, uint32_t pos) {
  if (p.block_table == nullptr) return int32_t(pos);
  const int32_t* bt = p.block_table + (row / p.rows_per_request) * p.block_table_stride;
  return bt[pos / uint32_t(p.page_size)] * p.page_size + int32_t(pos % uint32_t(p.page_size));
}

// One bitonic stage whose pairs (i, i + S) both lie in this thread's E
// registers (S a compile-time constant: registers are never indexed at run time).
template <int E, int S>
__device__ __forceinline__ void compare_in_thread(uint64_t (&v)[E], uint32_t base, uint32_t size) {
  if constexpr (S < E) {
#pragma unroll
    for (int j = 0; j < E; ++j)
      if ((j & S) == 0) {
        const bool desc = ((base + uint32_t(j)) & size) == 0;
        const uint64_t a = v[j], b = v[j + S];
        if ((a < b) == desc) v[j] = b, v[j + S] = a;
      }
  }
}

// Bitonic sort of E * kThreads pairs by descending value, thread t holding
// elements t*E .. t*E+E-1 in registers: strides below E compare within a
// thread, strides below 32E across the warp (shuffles), and only the longer
// ones go through shared memory, through two buffers in turn (one barrier per
// stage: a buffer is written again only after the barrier of the stage that
// read it).
template <class T, int E>
__device__ void bitonic_sort_regs(uint64_t (&v)[E], uint64_t* xchg) {
  constexpr uint32_t n2 = uint32_t(E) * T::kThreads;
  const uint32_t base = threadIdx.x * uint32_t(E);
  int buf = 0;
#pragma unroll 1
  for (uint32_t size = 2; size <= n2; size <<= 1) {
#pragma unroll 1
    for (uint32_t stride = size >> 1; stride > 0; stride >>= 1) {
      if (stride < uint32_t(E)) {  // both elements in this thread: stride 1, 2 or 4
        if (stride == 1) compare_in_thread<E, 1>(v, base, size);
        if (stride == 2) compare_in_thread<E, 2>(v, base, size);
        if (stride == 4) compare_in_thread<E, 4>(v, base, size);
        continue;
      }
      // The partner of element i is i ^ stride: another lane of the warp, or
      // (long strides) another warp, through shared memory.
      const bool in_warp = stride < 32u * E;
      uint64_t* x = xchg + buf * n2;
      if (!in_warp) {
#pragma unroll
        for (int j = 0; j < E; ++j) x[base + j] = v[j];
        __syncthreads();
        buf ^= 1;
      }
#pragma unroll
      for (int j = 0; j < E; ++j) {
        const uint32_t i = base + uint32_t(j);
        const uint64_t o =
            in_warp ? __shfl_xor_sync(0xffffffffu, v[j], int(stride / uint32_t(E))) : x[i ^ stride];
        const bool lower = (i & stride) == 0, desc = (i & size) == 0;
        v[j] = (lower == desc) ? (v[j] > o ? v[j] : o) : (v[j] < o ? v[j] : o);
      }
    }
  }
}

template <class T, int E>
__device__ void sort_write_e(const uint64_t* pairs, uint32_t n, uint64_t* xchg, const TopkParams& p,
                             int64_t row) {
  const uint32_t base = threadIdx.x * uint32_t(E);
  uint64_t v[E];
#pragma unroll
  for (int j = 0; j < E; ++j) v[j] = base + j < n ? pairs[base + j] : 0u;
  bitonic_sort_regs<T, E>(v, xchg);
  int32_t* out = p.out + row * p.out_stride;
#pragma unroll
  for (int j = 0; j < E; ++j)
    if (base + j < uint32_t(p.k))
      out[base + j] = base + j < n ? output_value(p, row, ~uint32_t(v[j])) : -1;
  for (uint32_t j = uint32_t(E) * T::kThreads + threadIdx.x; j < uint32_t(p.k); j += T::kThreads)
    out[j] = -1;
}

// Sorts pairs[0..n) (key << 32 | ~position: descending value = key desc, then
// position asc) and writes the row's k outputs (-1 past n). xchg: shared
// memory for 2 * max(pow2(n), 2 * kThreads) pairs, not aliasing pairs.
template <class T>
__device__ void sort_and_write(const uint64_t* pairs, uint32_t n, uint64_t* xchg,
                               const TopkParams& p, int64_t row) {
  __syncthreads();  // pairs complete; the data under xchg read
  uint32_t n2 = 2u * T::kThreads;
  while (n2 < n) n2 <<= 1;
  if (n2 == 2u * T::kThreads)
    sort_write_e<T, 2>(pairs, n, xchg, p, row);
  else if (n2 == 4u * T::kThreads)
    sort_write_e<T, 4>(pairs, n, xchg, p, row);
  else
    sort_write_e<T, 8>(pairs, n, xchg, p, row);
}

__device__ __forceinline__ uint64_t sort_pair(uint32_t key, uint32_t pos) {
  return (uint64_t(key) << 32) | uint64_t(~pos);
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

template <class T>
__global__ void __launch_bounds__(T::kThreads, T::kCtasPerSm) topk_kernel(const TopkParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem<T>& s = *reinterpret_cast<Smem<T>*>(smem_raw);
  cg::cluster_group cluster = cg::this_cluster();
  const int cs = int(cluster.num_blocks()), rank = int(cluster.block_rank());
  const int64_t row = blockIdx.x / cs;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const uint32_t k = uint32_t(p.k);

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

  // ---- stream: chunk c holds vectors v0 + c * kThreads * kVecs + tid * kVecs + j.
  constexpr int V = T::kVecs, D = T::kDepth;
  constexpr uint32_t kChunkVecs = uint32_t(T::kThreads) * V;
  const uint32_t chunks = (g.v1 - g.v0 + kChunkVecs - 1) / kChunkVecs;
  const uint32_t vbase = g.v0 + uint32_t(tid) * V;
  float4 ring[D][V];
#pragma unroll
  for (int d = 0; d < D; ++d)
#pragma unroll
    for (int j = 0; j < V; ++j) ring[d][j] = load_vec(g, vbase + uint32_t(d) * kChunkVecs + j);

  uint32_t fill = 0, parity = 0;
  float bound_f = key_bound_as_float(0u);  // a logit enters iff logit > bound_f
#pragma unroll 1
  for (uint32_t c0 = 0; c0 < chunks; c0 += D) {
#pragma unroll
    for (int d = 0; d < D; ++d) {
      const uint32_t c = c0 + d;
      if (c >= chunks) break;
      float x[V * 4];
#pragma unroll
      for (int j = 0; j < V; ++j) {
        x[4 * j + 0] = ring[d][j].x, x[4 * j + 1] = ring[d][j].y;
        x[4 * j + 2] = ring[d][j].z, x[4 * j + 3] = ring[d][j].w;
        ring[d][j] = load_vec(g, vbase + (c + D) * kChunkVecs + j);
      }
      uint32_t total, start;
#pragma unroll 1
      for (;;) {
        uint32_t mine = 0;
#pragma unroll
        for (int e = 0; e < V * 4; ++e) mine += x[e] > bound_f;
        // Slots from prefix sums: lanes in order within the warp, warps in
        // order within the chunk, so entries land in position order.
        const uint32_t incl = warp_inclusive_sum(mine);
        if (lane == 31) s.chunk_count[parity][warp] = incl;
        __syncthreads();
        const uint32_t w = lane < T::kWarps ? s.chunk_count[parity][lane] : 0u;
        parity ^= 1u;
        const uint32_t wincl = warp_inclusive_sum(w);
        total = __shfl_sync(0xffffffffu, wincl, T::kWarps - 1);
        start = fill + __shfl_sync(0xffffffffu, wincl - w, warp) + incl - mine;
        if (fill + total <= uint32_t(T::kCap)) break;
        const Cut cut = select_cut<T>(s, fill, k, T::kCap2, false);
        fill = compact<T>(s, fill, cut.thr, cut.need);
        bound_f = key_bound_as_float(cut.bound);
      }
      if (total == 0u) continue;
      const uint32_t p0 =
          4 * (vbase + c * kChunkVecs) - uint32_t(g.mis);  // >= 0 where x is a logit
#pragma unroll
      for (int e = 0; e < V * 4; ++e)
        if (x[e] > bound_f) s.key[start] = topk_key(x[e]), s.pos[start] = p0 + e, ++start;
      fill += total;
    }
  }
  __syncthreads();

  // ---- finish: this CTA's k best (its entries are in position order).
  {
    const Cut cut = select_cut<T>(s, fill, k, k, false);
    if (cut.kept < fill) fill = compact<T>(s, fill, cut.thr, cut.need);
  }
  uint64_t* pairs = reinterpret_cast<uint64_t*>(s.key2);
  uint64_t* xchg = reinterpret_cast<uint64_t*>(s.key);  // free once the pairs are built
  if (cs == 1) {
    if (p.best_first) {
      for (uint32_t i = tid; i < fill; i += T::kThreads) pairs[i] = sort_pair(s.key[i], s.pos[i]);
      sort_and_write<T>(pairs, fill, xchg, p, row);
    } else {
      int32_t* out = p.out + row * p.out_stride;
      for (int j = tid; j < p.k; j += T::kThreads)
        out[j] = uint32_t(j) < fill ? output_value(p, row, s.pos[j]) : -1;
    }
    return;
  }

  // ---- cluster: the k best of the CTAs' k best.
  const Cut cut = select_cut<T>(s, fill, k, k, true);
  {
    uint32_t gt = 0, eq = 0;
    for (uint32_t i = tid; i < fill; i += T::kThreads)
      gt += s.key[i] > cut.thr, eq += s.key[i] == cut.thr;
    uint32_t gt_all, eq_all;
    (void)block_exclusive_sum<T>(gt, s.warp_a, &gt_all);
    (void)block_exclusive_sum<T>(eq, s.warp_b, &eq_all);
    if (tid == 0) s.rank_gt = gt_all, s.rank_eq = eq_all;
  }
  cluster.sync();  // every rank's counts are visible
  // Ranks in order: rank q keeps its entries above the threshold and as many
  // of its ties as remain after the ties of ranks below it.
  uint32_t eq_run = 0, out_base = 0, out_total = 0, my_need = 0;
  for (int q = 0; q < cs; ++q) {
    const uint32_t gq = *cluster.map_shared_rank(&s.rank_gt, q);
    const uint32_t eqq = *cluster.map_shared_rank(&s.rank_eq, q);
    const uint32_t left = cut.need - min(cut.need, eq_run);
    if (q == rank) out_base = out_total, my_need = left;
    out_total += gq + min(eqq, left);
    eq_run += eqq;
  }
  fill = compact<T>(s, fill, cut.thr, my_need);
  cluster.sync();  // counts read everywhere; the leader's sort buffer is free
  if (p.best_first) {
    uint64_t* lead = cluster.map_shared_rank(pairs, 0);
    for (uint32_t i = tid; i < fill; i += T::kThreads)
      lead[out_base + i] = sort_pair(s.key[i], s.pos[i]);
  } else {
    int32_t* out = p.out + row * p.out_stride;
    for (uint32_t i = tid; i < fill; i += T::kThreads)
      out[out_base + i] = output_value(p, row, s.pos[i]);
    if (rank == 0)
      for (int j = int(out_total) + tid; j < p.k; j += T::kThreads) out[j] = -1;
  }
  cluster.sync();  // the leader's sort buffer is complete
  if (rank == 0 && p.best_first) sort_and_write<T>(pairs, out_total, xchg, p, row);
}

}  // namespace mla::cuda::topk
