// The rank finish of a row's candidates.
#pragma once
#include "cuda/topk/topk_common.cuh"

namespace mla::cuda::topk {

// ---- The rank finish (one CTA per row, or a cluster's leader): the exact k
// best of the candidates key/pos[0..n) and their output, in a fixed number of
// short phases (6 barriers by position, 5 best first) instead of select_cut's
// digit rounds, compact and radix_sort_desc (~25-35 barriers):
//
//   bins    the keys' range [lo, hi] in kBins linear bins ((key - lo) >> shift;
//           keys are monotone in the logit, so the bins are ranges of logits),
//           counted in s.hist; one scan from the top bin gives each bin's
//           first output slot and the bin t holding the k-th best.
//   gather  the entries of the bins from t up (best first) or of bin t alone
//           (by position) go to `tmp`, each bin's entries together (slots from
//           shared atomics: their order inside a bin varies, nothing read
//           from it does).
//   rank    an entry's slot is its bin's first slot plus the number of entries
//           of its bin before it in (key desc, position asc), a total order
//           (positions differ): best first, it is the output slot; by
//           position, the entry of slot k - 1 is the k-th best (K, P) and the
//           output is every candidate at or above it, in position order.
//
// A bin of more than kRankMaxBin entries (ties, logits in a narrow range, one
// far outlier) or more gathered entries than `tmp` holds returns false before
// anything is written: the caller runs the select path. Either way the output
// depends only on the candidates.
inline constexpr uint32_t kRankMaxBin = 64;

// Scratch for the rank finish: `cap` (key, position) pairs.
struct RankScratch {
  uint32_t* key;
  uint32_t* pos;
  uint32_t cap;
};
// The candidates the rank finish reads: key/pos[0..n) of one buffer (s.key/pos,
// or key2/pos2 where the sieve leaves them).
struct Entries {
  const uint32_t* key;
  const uint32_t* pos;
};

// Keys in kBins linear bins over their range [lo, hi]: bin (key - lo) >> shift,
// shift the least that keeps (hi - lo) >> shift below kBins. Keys grow with the
// logit, so a bin is a range of logits, and a narrow range still spreads.
struct LinearBins {
  uint32_t lo;
  int shift;
  uint32_t count;  // nonzero keys counted
  __device__ __forceinline__ uint32_t bin(uint32_t key) const { return (key - lo) >> shift; }
};

// Counts the nonzero keys of keys[0..n) in s.hist, in linear bins over their
// range. Starts after a barrier past every earlier reader of hist, warp_a/b and
// chunk_count[1]; two barriers, the second after the counts (so the caller may
// read hist, and write the key range, at once). `range_ready` (uniform): the
// caller already cleared hist and left each warp's min and max key in
// warp_a/b (every key nonzero; a barrier since), as the sieve's gather does:
// one pass and one barrier.
template <class T>
__device__ LinearBins count_linear_bins(Smem<T>& s, const uint32_t* keys, uint32_t n,
                                        bool range_ready = false) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  uint32_t hi;
  LinearBins lb;
  if (range_ready) {
    lb.count = n;
  } else {
    uint32_t lo = 0xffffffffu, cnt = 0u;
    hi = 0u;
#pragma unroll 4
    for (uint32_t i = tid; i < n; i += T::kThreads) {
      const uint32_t key = keys[i];
      if (key != 0u) lo = min(lo, key), hi = max(hi, key), ++cnt;
    }
    for (int i = tid; i < T::kBins; i += T::kThreads) s.hist[i] = 0u;
    lo = __reduce_min_sync(0xffffffffu, lo), hi = __reduce_max_sync(0xffffffffu, hi);
    cnt = __reduce_add_sync(0xffffffffu, cnt);
    if (lane == 0) s.warp_a[warp] = lo, s.warp_b[warp] = hi, s.chunk_count[1][warp] = cnt;
    __syncthreads();
    lb.count = __reduce_add_sync(0xffffffffu, lane < T::kWarps ? s.chunk_count[1][lane] : 0u);
  }
  lb.lo = __reduce_min_sync(0xffffffffu, lane < T::kWarps ? s.warp_a[lane] : 0xffffffffu);
  hi = __reduce_max_sync(0xffffffffu, lane < T::kWarps ? s.warp_b[lane] : 0u);
  lb.shift = lb.count == 0u ? 0 : max(0, 32 - __clz(hi - lb.lo) - T::kDigitBits);
#pragma unroll 4
  for (uint32_t i = tid; i < n; i += T::kThreads) {
    const uint32_t key = keys[i];
    if (key != 0u) count_digit(s.hist, lb.bin(key));
  }
  __syncthreads();
  return lb;
}

// The bins of a row's candidates and the gathered entries (rank_gather).
struct RankBins {
  LinearBins lb;
  uint32_t tbin, above, tcount;  // the bin of the kk-th best, slots above it, its entries
  uint32_t base, gathered;       // first slot gathered, entries gathered to the scratch
  bool best;                     // every bin from tbin up gathered (else tbin alone)
};

// Phases "bins" and "gather" for the kk (1 <= kk <= n) best of in[0..n) (tmp
// elsewhere): best first gathers the bins from the kk-th's up, otherwise that
// bin alone. Starts after a barrier that made in[0..n) complete (and every earlier
// reader of hist, warp_a/b, chunk_count[1] and found_* passed); ends with a
// barrier. Returns false (uniform, nothing gathered) when a bin holds more than
// kRankMaxBin entries or the gathered entries pass tmp.cap; afterwards
// hist[d] is the end of bin d's slots for every gathered bin.
template <class T>
__device__ bool rank_gather(Smem<T>& s, const Entries& in, uint32_t n, uint32_t kk, bool best,
                            const RankScratch& tmp, RankBins* rb, bool range_ready = false) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const LinearBins lb = count_linear_bins<T>(s, in.key, n, range_ready);
  // Scan from the top bin (thread 0 owns the highest kPer): hist becomes each
  // bin's first slot; the bin of slot kk - 1 and the largest bin at or above it.
  constexpr int kPer = T::kBins / T::kThreads;
  const int top = T::kBins - 1 - tid * kPer;
  uint32_t c[kPer], sum = 0;
#pragma unroll
  for (int j = 0; j < kPer; ++j) c[j] = s.hist[top - j], sum += c[j];
  uint32_t total;
  uint32_t acc = block_exclusive_sum<T>(sum, s.warp_a, &total);
  uint32_t mx = 0;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    if (acc < kk && acc + c[j] >= kk)
      s.found_bin = uint32_t(top - j), s.found_above = acc, s.found_count = c[j];
    if (acc < kk) mx = max(mx, c[j]);
    s.hist[top - j] = acc;
    acc += c[j];
  }
  mx = __reduce_max_sync(0xffffffffu, mx);
  if (lane == 0) s.warp_b[warp] = mx;
  __syncthreads();
  mx = __reduce_max_sync(0xffffffffu, lane < T::kWarps ? s.warp_b[lane] : 0u);
  RankBins r;
  r.lb = lb, r.tbin = s.found_bin, r.above = s.found_above, r.tcount = s.found_count, r.best = best;
  // Best first: slots [0, above + tcount); otherwise [above, above + tcount).
  r.base = best ? 0u : r.above;
  r.gathered = best ? r.above + r.tcount : r.tcount;
  if ((best ? mx : r.tcount) > kRankMaxBin || r.gathered > tmp.cap) {
    __syncthreads();  // warp_b, found_* and hist read by all before the select path writes them
    return false;
  }
#pragma unroll 4
  for (uint32_t i = tid; i < n; i += T::kThreads) {
    const uint32_t key = in.key[i], d = lb.bin(key);
    if (d == r.tbin || (best && d > r.tbin)) {
      const uint32_t slot = atomicAdd(&s.hist[d], 1u) - r.base;
      tmp.key[slot] = key, tmp.pos[slot] = in.pos[i];
    }
  }
  __syncthreads();
  *rb = r;
  return true;
}

// Gathered entry j's slot among the candidates (key desc, position asc): its
// bin's first slot plus the entries of its bin before it. A gathered bin's
// slots start where the bin above it ends (best first: every bin above the
// kk-th's was gathered too), or at 0 for the top bin. *ties: the entries of
// its bin with its key and a lower position.
template <class T>
__device__ __forceinline__ uint32_t rank_slot(const Smem<T>& s, const RankBins& r,
                                              const RankScratch& tmp, uint32_t j, uint32_t* ties) {
  const uint32_t key = tmp.key[j], pos = tmp.pos[j], d = r.lb.bin(key);
  const uint32_t start = !r.best ? r.above : d + 1 < uint32_t(T::kBins) ? s.hist[d + 1] : 0u;
  const uint32_t end = s.hist[d];
  uint32_t rank = 0, t = 0;
  // Bins hold ~1-3 entries and the warp runs its longest bin: a plain loop
  // (unrolled, its remainder and checks cost more than they save).
#pragma unroll 1
  for (uint32_t m = start - r.base; m < end - r.base; ++m) {
    const uint32_t mk = tmp.key[m], mp = tmp.pos[m];
    const uint32_t tie = uint32_t(mk == key && mp < pos);
    rank += uint32_t(mk > key) | tie, t += tie;
  }
  *ties = t;
  return start + rank;
}

// The cut (select_cut's Cut) keeping the kk best of key/pos[0..n), kk < n,
// from the kk-th best (K, P): every key above K, and the ties at K up to P,
// which are the first `need` ties in buffer order when the buffer is in
// position order. Same start as rank_gather; ends with a barrier. False: the
// bins are too full (nothing written but the scratch).
template <class T>
__device__ bool rank_cut(Smem<T>& s, uint32_t n, uint32_t kk, const RankScratch& tmp, Cut* cut) {
  RankBins r;
  if (!rank_gather<T>(s, Entries{s.key, s.pos}, n, kk, false, tmp, &r)) return false;
  for (uint32_t j = threadIdx.x; j < r.gathered; j += T::kThreads) {
    uint32_t ties;
    if (rank_slot<T>(s, r, tmp, j, &ties) == kk - 1)
      s.kth_key = tmp.key[j], s.kth_pos = tmp.pos[j], s.kth_need = ties + 1u;
  }
  __syncthreads();
  *cut = Cut{s.kth_key, s.kth_need, kk, s.kth_key};
  return true;
}

// The row's output from the candidates in[0..n) (position order), tmp
// elsewhere. Starts after a barrier that made in[0..n) complete (and every
// earlier reader of hist, warp_a/b, chunk_count[1] and found_* passed;
// range_ready: count_linear_bins'). Returns true when the row is written;
// false (uniform over the CTA, after a barrier, nothing written, in[] intact)
// when the bins are too full.
template <class T>
__device__ bool rank_finish(Smem<T>& s, const Entries& in, uint32_t n, const RankScratch& tmp,
                            const TopkParams& p, int64_t row, bool range_ready = false) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const uint32_t k = uint32_t(p.k), kk = min(k, n);
  const bool best = p.best_first;
  int32_t* out = p.out + row * p.out_stride;
  if (n == 0) {
    for (uint32_t j = tid; j < k; j += T::kThreads) out[j] = -1;
    return true;
  }
  RankBins r;
  if (!rank_gather<T>(s, in, n, kk, best, tmp, &r, range_ready)) return false;
  for (uint32_t j = tid; j < r.gathered; j += T::kThreads) {
    uint32_t ties;
    const uint32_t slot = rank_slot<T>(s, r, tmp, j, &ties);
    if (best) {
      if (slot < k) out[slot] = output_value(p, row, tmp.pos[j]);
    } else if (slot == kk - 1) {
      s.kth_key = tmp.key[j], s.kth_pos = tmp.pos[j];
    }
  }
  for (uint32_t j = kk + tid; j < k; j += T::kThreads) out[j] = -1;
  if (best) return true;
  __syncthreads();  // kth_* written

  // By position: every candidate at or above (K, P), in buffer (position)
  // order; warp w takes a contiguous range, slots from ballots.
  const uint32_t kth = s.kth_key, kpos = s.kth_pos;
  const uint32_t per = ((n + T::kWarps - 1) / T::kWarps + 31u) & ~31u;
  const uint32_t b0 = min(n, warp * per), b1 = min(n, b0 + per);
  const uint32_t lt = lanemask_lt();
  uint32_t mine = 0;
#pragma unroll 4
  for (uint32_t i = b0 + lane; i < b1; i += 32) {
    const uint32_t key = in.key[i];
    mine += key > kth || (key == kth && in.pos[i] <= kpos);
  }
  mine = __reduce_add_sync(0xffffffffu, mine);
  uint32_t unused, slot;
  (void)warp_offsets(s, mine, 0u, 0u, unused, slot);
#pragma unroll 4
  for (uint32_t b = b0; b < b1; b += 32) {
    const uint32_t i = b + lane;
    const uint32_t key = i < b1 ? in.key[i] : 0u, pos = i < b1 ? in.pos[i] : 0u;
    const bool keep = i < b1 && (key > kth || (key == kth && pos <= kpos));
    const uint32_t kb = __ballot_sync(0xffffffffu, keep);
    if (keep) out[slot + __popc(kb & lt)] = output_value(p, row, pos);
    slot += __popc(kb);
  }
  return true;
}

}  // namespace mla::cuda::topk
