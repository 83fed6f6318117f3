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
//            memory (stable radix sort); otherwise the entries are written as they are,
//            in ascending position. Positions become cache slots on the way.
//
// Every shared-memory hand-over between threads is ordered by a CTA or cluster
// barrier; nothing is asynchronous (loads go to registers), so there is no
// protocol to race. Output slots come from prefix sums and a total order on
// (key, position), so the bits written depend only on the input.
#pragma once
#include "cuda/topk/topk_common.cuh"
#include "cuda/topk/topk_rank.cuh"
#include "cuda/topk/topk_sieve.cuh"

namespace mla::cuda::topk {

// This CTA's k best of key/pos[0..fill) (position order), in place: the rank
// cut when its bins allow, else select_cut's digit rounds. Same start as
// select_cut; ends with a barrier. Returns the kept count.
template <class T>
__device__ uint32_t own_k_best(Smem<T>& s, uint32_t fill, uint32_t k, const RankScratch& scratch) {
  if (fill <= k) return fill;  // uniform; the caller's barrier made the buffer stable
  Cut cut;
  if (!rank_cut<T>(s, fill, k, scratch, &cut)) cut = select_cut<T>(s, fill, k, k, false);
  return cut.kept < fill ? compact<T>(s, fill, cut.thr, cut.need) : fill;
}

// The cluster's finish by gathering (cs * k <= kCap): every CTA
// keeps its own k best (own_k_best), the CTAs' counts give each its offset in
// rank (so position) order, each writes its entries into the leader's key/pos
// after the leader's own (distributed shared memory), and the leader alone
// finishes the row (rank_finish, else the select path) over at most cs * k
// entries: two cluster barriers, no cluster-wide histograms. The row's k best
// are among the union of the CTAs' k best. Non-leaders return after the second
// cluster barrier, past which nobody touches another CTA's shared memory.
template <class T, class Probe>
__device__ void gather_finish(Smem<T>& s, uint32_t fill, const TopkParams& p, int64_t row,
                              const RankScratch& scratch, const Probe& probe) {
  cg::cluster_group cluster = cg::this_cluster();
  const int cs = int(cluster.num_blocks()), rank = int(cluster.block_rank());
  const uint32_t k = uint32_t(p.k);
  fill = own_k_best<T>(s, fill, k, scratch);
  probe.mark(2);
  if (threadIdx.x == 0) s.rank_n = fill;
  cluster.sync();  // every rank's count visible; the leader's own entries final
  uint32_t off = 0, total = 0;
  for (int q = 0; q < cs; ++q) {
    const uint32_t nq = *cluster.map_shared_rank(&s.rank_n, q);
    off += q < rank ? nq : 0u, total += nq;
  }
  if (rank != 0) {
    uint32_t* lead_key = cluster.map_shared_rank(s.key, 0);
    uint32_t* lead_pos = cluster.map_shared_rank(s.pos, 0);
    for (uint32_t i = threadIdx.x; i < fill; i += T::kThreads)
      lead_key[off + i] = s.key[i], lead_pos[off + i] = s.pos[i];
  }
  cluster.sync();  // the leader's key/pos[0..total) complete, in position order
  probe.mark(3);
  if (rank == 0 && !rank_finish<T>(s, Entries{s.key, s.pos}, total, scratch, p, row)) {
    const Cut cut = select_cut<T>(s, total, k, k, false);
    if (cut.kept < total) total = compact<T>(s, total, cut.thr, cut.need);
    if (p.best_first)
      sort_and_write<T>(s, s.key, s.pos, s.key2, s.pos2, total, p, row);
    else
      write_row<T>(s.pos, total, p, row);
  }
  probe.mark(4);
}

// After the stream: this CTA's candidates are key/pos[0..fill) (sieved:
// key2/pos2[0..fill), with their key range left for the rank finish,
// count_linear_bins' range_ready), in position order, and hold its k best (or
// all its candidates); the buffer is stable (a barrier since the last write).
// Selects the row's k best (over the cluster when the row is split) and
// writes the row.
template <class T, class Probe>
__device__ void finish_row(Smem<T>& s, uint32_t fill, const TopkParams& p, int64_t row,
                           const RankScratch& scratch, const Probe& probe, bool sieved = false) {
  cg::cluster_group cluster = cg::this_cluster();
  const int cs = int(cluster.num_blocks()), rank = int(cluster.block_rank());
  const int tid = threadIdx.x;
  const uint32_t k = uint32_t(p.k);

  // ---- one CTA per row: the rank finish when its bins are small enough
  // (sieved: over key2/pos2, key/pos its scratch).
  if (cs == 1 &&
      (sieved ? rank_finish<T>(s, Entries{s.key2, s.pos2}, fill,
                               RankScratch{s.key, s.pos, uint32_t(T::kCap)}, p, row, true)
              : rank_finish<T>(s, Entries{s.key, s.pos}, fill, scratch, p, row))) {
    probe.mark(2), probe.mark(3), probe.mark(4);
    return;
  }
  // Every other finish reads key/pos: the sieve's entries move there (a rank
  // finish that refused wrote nothing but hist and the scan words).
  if (sieved) {
    for (uint32_t i = tid; i < fill; i += T::kThreads) s.key[i] = s.key2[i], s.pos[i] = s.pos2[i];
    __syncthreads();
  }
  // ---- a cluster whose CTAs' k best fit the leader's buffer: gather them
  // there and finish on the leader alone.
  if (cs > 1 && uint64_t(cs) * k <= uint64_t(T::kCap)) {
    gather_finish<T>(s, fill, p, row, scratch, probe);
    return;
  }

  // ---- finish: this CTA's k best (its entries are in position order). With a
  // cluster this shrinks each CTA's part before the merge: the cluster-wide
  // select over whole buffers measured slower (distributed-memory histograms).
  {
    const Cut cut = select_cut<T>(s, fill, k, k, false);
    if (cut.kept < fill) fill = compact<T>(s, fill, cut.thr, cut.need);
  }
  probe.mark(2);
  if (cs == 1) {
    probe.mark(3);
    if (p.best_first)
      sort_and_write<T>(s, s.key, s.pos, s.key2, s.pos2, fill, p, row);
    else
      write_row<T>(s.pos, fill, p, row);
    probe.mark(4);
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
    uint32_t* lead_key = cluster.map_shared_rank(s.key2, 0);
    uint32_t* lead_pos = cluster.map_shared_rank(s.pos2, 0);
    for (uint32_t i = tid; i < fill; i += T::kThreads)
      lead_key[out_base + i] = s.key[i], lead_pos[out_base + i] = s.pos[i];
  } else {
    int32_t* out = p.out + row * p.out_stride;
    for (uint32_t i = tid; i < fill; i += T::kThreads)
      out[out_base + i] = output_value(p, row, s.pos[i]);
    if (rank == 0)
      for (int j = int(out_total) + tid; j < p.k; j += T::kThreads) out[j] = -1;
  }
  cluster.sync();  // the leader's entries are complete, in rank (so position) order
  probe.mark(3);
  if (rank == 0 && p.best_first)
    sort_and_write<T>(s, s.key2, s.pos2, s.key, s.pos, out_total, p, row);
  probe.mark(4);
}

// Where a CTA's time goes, for the benchmark's `topk-probe` (bench/bench_dsa.cu
// defines a probe that records clock64 stamps): the library instantiates
// NoProbe, whose calls compile to nothing. Stamps: 0 start, 1 stream done,
// 2 own k best done, 3 output begins, 4 end; sums: 5 cycles in compactions,
// 6 compactions, 7 entries after the stream.
struct NoProbe {
  __device__ __forceinline__ void mark(int) const {}
  __device__ __forceinline__ long long now() const { return 0; }
  __device__ __forceinline__ void add(int, long long) const {}
};

// The chunk stream (module comment, "stream" and "compact"): every logit of
// the segment above a bound that compactions raise. Returns the entries in
// key/pos[0..fill), in position order; ends before the caller's barrier.
template <class T, class Probe>
__device__ uint32_t chunk_stream(Smem<T>& s, const Segment& g, uint32_t k, const Probe& probe) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // Chunk c holds vectors v0 + c * kThreads * kVecs + tid * kVecs + j.
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
        const long long t0 = probe.now();
        // Keep at most 2k (at most kCap2): a tighter bound lets fewer later
        // logits in, so fewer compactions and a smaller final select.
        const Cut cut = select_cut<T>(s, fill, k, min(2 * k, uint32_t(T::kCap2)), false);
        fill = compact<T>(s, fill, cut.thr, cut.need);
        bound_f = key_bound_as_float(cut.bound);
        probe.add(5, probe.now() - t0), probe.add(6, 1);
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
  return fill;
}

template <class T, class Probe = NoProbe>
__global__ void __launch_bounds__(T::kThreads, T::kCtasPerSm)
    topk_kernel(const TopkParams p, const Probe probe = Probe{}) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem<T>& s = *reinterpret_cast<Smem<T>*>(smem_raw);
  cg::cluster_group cluster = cg::this_cluster();
  const int cs = int(cluster.num_blocks()), rank = int(cluster.block_rank());
  const int64_t row = blockIdx.x / cs;
  const uint32_t k = uint32_t(p.k);

  probe.mark(0);
  uint32_t fill = 0;
  // The sieve when its sample says the candidates fit, else (or when it finds
  // out they do not) the chunk stream from the start. Each finds the segment
  // itself: nothing of it stays live (in registers) across the other.
  const bool sieved = sieve_stream<T>(s, segment_of(p, row, cs, rank), k, p.l2_prefetch, &fill);
  if (!sieved) fill = chunk_stream<T>(s, segment_of(p, row, cs, rank), k, probe);
  __syncthreads();

  probe.mark(1), probe.add(7, fill);
  finish_row<T>(s, fill, p, row, RankScratch{s.key2, s.pos2, uint32_t(T::kCap2)}, probe, sieved);
}

}  // namespace mla::cuda::topk
