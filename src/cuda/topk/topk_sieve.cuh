// The sieve stream (the streaming tiles): a segment read
// once with no CTA barrier while reading, when a sample says its candidates
// fit the buffer.
//
//   sample  kSieveSampleVecs 16-byte vectors per thread, spread over the
//           segment, in linear bins (topk_rank.cuh); the bin of the sample's
//           m-th best, m = the expected count of samples at or above the
//           segment's k-th best plus 4 standard deviations and 4, gives the
//           bound: a logit enters when its key reaches that bin's low end
//           (fewer than k enter in ~1e-5 of random rows: a second read, which
//           in a late CTA would lengthen the whole launch).
//           The bound is a guess: nothing below relies on it being right.
//   stream  warp w reads its own contiguous range of the segment (kSieveVecs
//           vectors per lane per step, kSieveDepth steps in flight) and
//           appends the entering logits to its own slice of key/pos (kCap /
//           kWarps entries), at slots from four ballots per vector: no CTA
//           barrier until the end, entries in position order in each slice.
//   check   every logit above the bound entered, so when at least k did, the
//           segment's k best are among them. A slice that would overflow, fewer
//           than k entries, or more than kCap2 (the gather's room), and the
//           CTA returns false: the caller streams the segment again with the
//           chunk loop (compactions), which needs no guess. A bad row costs a
//           second read, never a wrong set.
//   gather  the slices, in warp (so position) order, to key/pos[0..fill)
//           through key2/pos2.
//
// Every hand-over is behind a CTA barrier; slices are written by their warp
// alone; the bound depends only on the sampled logits, so the entries (and
// the output) depend only on the input.
#pragma once
#include "cuda/topk/topk_common.cuh"
#include "cuda/topk/topk_rank.cuh"

namespace mla::cuda::topk {

// Vectors per lane per load step, and steps in flight: 8 float4 registers, 4
// KB in flight per warp, 128 KB per SM at 1024 threads (the chunk loop: 64 KB).
// Larger rings measured no more spills at compile time; the kernel's spills
// (40-byte frame) do not grow with the ring.
inline constexpr int kSieveVecs = 4, kSieveDepth = 2;
// L2 prefetch: a warp's lane 0 asks L2 for steps [0, 2P) of its range before
// its first loads, then at step j (a multiple of P) for steps [j + P, j + 2P):
// P to 2P steps (2 KB each per warp) ahead of the ring. The measured rate of
// the ring alone was ~12 GB/s per SM (loads from HBM, 8 16-byte vectors per
// lane in flight); from L2 the same ring waits a shorter latency. P is the
// largest power of two (2 to 64) that keeps the whole grid's prefetched-ahead
// bytes (grid x warps x 2P x 2 KB) within kSievePrefetchBytes, a share of L2:
// a few CTAs (one row over a cluster) prefetch their whole segments at once,
// a full GPU (128 x 128K: P = 2, 256 KB per SM) a window.
inline constexpr uint64_t kSievePrefetchBytes = 32ull << 20;

__device__ __forceinline__ float4 neg_inf4() {
  return make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
}

// Runs the sieve over segment g. True: the segment's candidates above the
// bound (at least k, all its k best among them) are in key/pos[0..*fill), in
// position order, after a barrier. False (uniform over the CTA, after a
// barrier): the caller must stream the segment another way; key/pos, key2/pos2,
// hist and the CTA scratch hold nothing it needs.
template <class T>
__device__ bool sieve_stream(Smem<T>& s, const Segment& g, uint32_t k, bool l2_prefetch,
                             uint32_t* fill) {
  constexpr int W = T::kWarps, U = kSieveVecs, D = kSieveDepth;
  constexpr uint32_t kSlice = uint32_t(T::kCap / W);
  static_assert(4 * kSieveSampleVecs * T::kThreads <= T::kCap, "the sample fits key");
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const uint32_t nv = g.v1 - g.v0;
  // The sample's rank m and whether the candidates are expected to fit
  // (topk_params.hpp, sieve_plan): else the chunk loop (short rows, the
  // 256-thread tile, k near the row's length).
  const SievePlan plan = sieve_plan(T::kThreads, T::kCap, T::kCap2, int64_t(4) * nv, int(k));
  const uint32_t kSamples = plan.samples, m = plan.m;
  if (!plan.takes) return false;  // uniform: no shared memory touched, no barrier needed

  // Warp w's vectors [w0, w1): step j holds w0 + (j * U + u) * 32 + lane.
  const uint32_t per = ((nv + W - 1) / W + 31u) & ~31u;
  const uint32_t w0 = g.v0 + min(nv, uint32_t(warp) * per), w1 = g.v0 + min(nv, (warp + 1u) * per);
  const uint32_t steps = (w1 - w0 + 32u * U - 1u) / (32u * U);
  const auto load = [&](uint32_t step, int u) {
    const uint32_t v = w0 + (step * U + uint32_t(u)) * 32u + uint32_t(lane);
    return v < w1 ? load_vec(g, v) : neg_inf4();
  };
  uint32_t P = 2;
  while (P < 64u && uint64_t(gridDim.x) * W * (4u * P) * (32u * U * 16u) <= kSievePrefetchBytes)
    P *= 2;
  const auto prefetch = [&](uint32_t s0, uint32_t s1) {  // steps [s0, s1) of this warp
    if (l2_prefetch && lane == 0)
      prefetch_vecs_l2(g, min(w1, w0 + s0 * U * 32u), min(w1, w0 + s1 * U * 32u));
  };
  prefetch(0u, 2u * P);
  // The first steps' loads go out before the sample's select, which they do
  // not depend on.
  float4 ring[D][U];
#pragma unroll
  for (int d = 0; d < D; ++d) {
#pragma unroll
    for (int u = 0; u < U; ++u) ring[d][u] = load(uint32_t(d), u);
  }

  // ---- sample and bound.
#pragma unroll
  for (int i = 0; i < kSieveSampleVecs; ++i) {
    const uint32_t t = uint32_t(i * T::kThreads + tid);
    const uint32_t v = g.v0 + uint32_t(uint64_t(t) * nv / (kSamples / 4u));
    const float4 x = load_vec(g, v);
    reinterpret_cast<uint4*>(s.key)[t] =
        make_uint4(topk_key(x.x), topk_key(x.y), topk_key(x.z), topk_key(x.w));
  }
  __syncthreads();  // the sample complete (every earlier reader: the caller's start)
  const LinearBins lb = count_linear_bins<T>(s, s.key, kSamples);
  if (lb.count < m) {
    __syncthreads();  // hist and the scratch read; nothing else is
    return false;     // few candidates in the sample: the chunk loop
  }
  find_bin<T>(s, T::kBins, 0u, m, 1);
  const uint32_t low = lb.lo + (s.found_bin << lb.shift);  // >= a candidate key
  const float bound = key_bound_as_float(low - 1u);        // enters iff key >= low

  // ---- stream into the warp's slice.
  uint32_t* sk = s.key + uint32_t(warp) * kSlice;
  uint32_t* sp = s.pos + uint32_t(warp) * kSlice;
  const uint32_t lt = lanemask_lt();
  uint32_t cnt = 0;
  bool over = false;
#pragma unroll 1
  for (uint32_t j0 = 0; j0 < steps && !over; j0 += D) {
#pragma unroll
    for (int d = 0; d < D; ++d) {
      const uint32_t j = j0 + uint32_t(d);
      // Uniform over the warp. Step j comes from the ring; its slot refills
      // with step j + D after (the other steps stay in flight meanwhile; no
      // second copy in registers).
      if (j >= steps || over) break;
      if ((j & (P - 1u)) == 0u && j > 0u) prefetch(j + P, j + 2u * P);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const float e[4] = {ring[d][u].x, ring[d][u].y, ring[d][u].z, ring[d][u].w};
        const bool in[4] = {e[0] > bound, e[1] > bound, e[2] > bound, e[3] > bound};
        uint32_t below;
        const uint32_t all = ballot_slots4(in, lt, &below);
        if (all == 0u) continue;
        if (cnt + all > kSlice) {
          over = true;
          break;
        }
        // Lane order then element order is position order.
        uint32_t o = cnt + below;
        const uint32_t p0 =
            4u * (w0 + (j * U + uint32_t(u)) * 32u + uint32_t(lane)) - uint32_t(g.mis);
#pragma unroll
        for (int q = 0; q < 4; ++q)
          if (in[q]) sk[o] = topk_key(e[q]), sp[o] = p0 + uint32_t(q), ++o;
        cnt += all;
      }
#pragma unroll
      for (int u = 0; u < U; ++u) ring[d][u] = load(j + D, u);
    }
  }

  // ---- check and gather.
  if (lane == 0) s.chunk_count[0][warp] = over ? 0xffffffffu : cnt;
  __syncthreads();
  const uint32_t c = lane < W ? s.chunk_count[0][lane] : 0u;
  const bool overflow = __any_sync(0xffffffffu, c == 0xffffffffu);
  const uint32_t incl = warp_inclusive_sum(overflow ? 0u : c);
  const uint32_t total = __shfl_sync(0xffffffffu, incl, W - 1);
  if (overflow || total < k || total > uint32_t(T::kCap2)) {
    __syncthreads();  // chunk_count read everywhere before the chunk loop writes it
    return false;
  }
  const uint32_t start = __shfl_sync(0xffffffffu, incl - c, warp);
  for (uint32_t i = lane; i < cnt; i += 32) s.key2[start + i] = sk[i], s.pos2[start + i] = sp[i];
  __syncthreads();
  for (uint32_t i = tid; i < total; i += T::kThreads) s.key[i] = s.key2[i], s.pos[i] = s.pos2[i];
  __syncthreads();
  *fill = total;
  return true;
}

}  // namespace mla::cuda::topk
