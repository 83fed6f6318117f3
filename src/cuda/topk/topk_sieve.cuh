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
//           appends the entering logits (raw bits) to its own slice of
//           key/pos (kCap / kWarps entries), at slots from one warp scan per
//           step of the lanes' counts (one byte per vector): no CTA barrier
//           until the end, entries in position order in each slice.
//   check   every logit above the bound entered, so when at least k did, the
//           segment's k best are among them. A slice that would overflow, fewer
//           than k entries, or more than kCap2 (the gather's room), and the
//           CTA returns false: the caller streams the segment again with the
//           chunk loop (compactions), which needs no guess. A bad row costs a
//           second read, never a wrong set.
//   gather  the slices, in warp (so position) order, to key2/pos2[0..fill),
//           the bits mapped to keys (topk_key) on the way.
//
// Every hand-over is behind a CTA barrier; slices are written by their warp
// alone; the bound depends only on the sampled logits, so the entries (and
// the output) depend only on the input.
#pragma once
#include "cuda/topk/topk_common.cuh"
#include "cuda/topk/topk_rank.cuh"

namespace mla::cuda::topk {

// Vectors per lane per load step (one count byte each in the step's scan),
// and steps in flight: 8 float4 registers, 4
// KB in flight per warp, 128 KB per SM at 1024 threads (the chunk loop: 64 KB).
// Larger rings measured no more spills at compile time; the kernel's spills
// (40-byte frame) do not grow with the ring.
inline constexpr int kSieveVecs = 4, kSieveDepth = 2;
static_assert(kSieveVecs <= 4, "a step's per-vector counts are the bytes of one word");
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

// p[Off] through the read-only path, the offset an immediate of the load:
// the compiler otherwise keeps one 64-bit pointer per ring slot live across
// the stream loop (spilled at 64 registers). Volatile: never executed ahead
// of the caller's bounds check.
template <int Off>
__device__ __forceinline__ float4 ldg_at(const float4* p) {
  float4 x;
  asm volatile("ld.global.nc.v4.f32 {%0, %1, %2, %3}, [%4 + %5];"
               : "=f"(x.x), "=f"(x.y), "=f"(x.z), "=f"(x.w)
               : "l"(p), "n"(Off * 16));
  return x;
}

// A step's vectors u = I.. of one lane: src[32 u] where rr + 32 u < n.
template <int I, int U>
__device__ __forceinline__ void ldg_step(float4 (&x)[U], const float4* src, uint32_t rr,
                                         uint32_t n) {
  if constexpr (I < U) {
    if (rr + uint32_t(I) * 32u < n) x[I] = ldg_at<I * 32>(src);
    ldg_step<I + 1>(x, src, rr, n);
  }
}

__device__ __forceinline__ float4 neg_inf4() {
  return make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
}

// Runs the sieve over segment g. True: the segment's candidates above the
// bound (at least k, all its k best among them) are in key2/pos2[0..*fill), in
// position order, after a barrier; hist is clear and warp_a/b hold the warps'
// min and max keys (count_linear_bins' range_ready). False (uniform over the CTA, after a
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

  // Warp w's vectors [w0, w1): step j holds w0 + (j * U + u) * 32 + lane. The
  // ring takes the whole vectors [f0, f1) with no per-element bounds; a
  // partial first or last vector of the row (at most one each, at the ends of
  // the range) is appended before and after the stream (append_edges).
  const uint32_t per = ((nv + W - 1) / W + 31u) & ~31u;
  const uint32_t w0 = g.v0 + min(nv, uint32_t(warp) * per), w1 = g.v0 + min(nv, (warp + 1u) * per);
  const uint32_t steps = (w1 - w0 + 32u * U - 1u) / (32u * U);
  const uint32_t f0 = min(max(w0, g.vf0), w1), f1 = max(f0, min(w1, g.vf1));
  // Offset r of a lane's vector from w0 is in the ring iff r - (f0 - w0) < f1 - f0.
  const uint32_t r_lo = f0 - w0, r_n = f1 - f0;
  const float4* wvec = g.vec + w0 + uint32_t(lane);
  const auto whole = [&](uint32_t step, int u) {
    return (step * U + uint32_t(u)) * 32u + uint32_t(lane) - r_lo < r_n;
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
  // A slot outside [f0, f1) keeps an old value: the compare masks it (whole).
  float4 ring[D][U];
#pragma unroll
  for (int d = 0; d < D; ++d) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      ring[d][u] = neg_inf4();
      if (whole(uint32_t(d), u)) ring[d][u] = __ldg(wvec + uint32_t(d * U + u) * 32u);
    }
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

  // ---- stream into the warp's slice (raw logit bits: the gather maps the
  // entries to keys). Per step, each lane's entering counts for its U vectors
  // packed one byte per vector (at most 4 each, 128 over the warp: no carry
  // between bytes) and one warp scan of the packed word give every vector's
  // first slot: the slots of the warp's vectors u' < u, then of lanes below,
  // then the elements before, in the vector. Lane order in a vector, then
  // vector order, is position order.
  static_assert(offsetof(Smem<T>, pos) == offsetof(Smem<T>, key) + 4 * T::kCap,
                "a slice's positions lie kCap words past its keys");
  uint32_t* sk = s.key + uint32_t(warp) * kSlice;
  uint32_t* sp = s.pos + uint32_t(warp) * kSlice;
  uint32_t cnt = 0;
  bool over = false;
  // The partial vectors [a, b) (at most one) in position order after the
  // slice's entries so far: every lane loads the same vector, lane 0 writes.
  const auto append_edges = [&](uint32_t a, uint32_t b) {
    for (uint32_t v = a; v < b && !over; ++v) {
      const float4 x = load_vec(g, v);
      const float e[4] = {x.x, x.y, x.z, x.w};
      uint32_t n = 0;
#pragma unroll
      for (int q = 0; q < 4; ++q) n += e[q] > bound;
      if (cnt + n > kSlice) {
        over = true;
        break;
      }
      const uint32_t p0 = 4u * v - uint32_t(g.mis);
#pragma unroll
      for (int q = 0; q < 4; ++q)
        if (e[q] > bound) {
          if (lane == 0) sk[cnt] = __float_as_uint(e[q]), sp[cnt] = p0 + uint32_t(q);
          ++cnt;
        }
    }
  };
  append_edges(w0, f0);
#pragma unroll 1
  for (uint32_t j0 = 0; j0 < steps && !over; j0 += D) {
#pragma unroll
    for (int d = 0; d < D; ++d) {
      const uint32_t j = j0 + uint32_t(d);
      // Uniform over the warp. Step j comes from the ring; its slot refills
      // with step j + D after (the other steps stay in flight meanwhile; no
      // second copy in registers).
      if (j >= steps) break;
      if ((j & (P - 1u)) == 0u && j > 0u) prefetch(j + P, j + 2u * P);
      // Bit 8u + q of `enter`: element q of vector u enters (one register, not
      // sixteen predicates); each byte's popcount is that vector's count.
      uint32_t enter = 0;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const float4 x = ring[d][u];
        const bool ok = whole(j, u);
        const float e[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
        for (int q = 0; q < 4; ++q)
          if (ok && e[q] > bound) enter |= 1u << (8 * u + q);
      }
      uint32_t packed = enter - ((enter >> 1) & 0x55555555u);
      packed = (packed & 0x33333333u) + ((packed >> 2) & 0x33333333u);
      const uint32_t incl = warp_inclusive_sum(packed);
      const uint32_t tot = __shfl_sync(0xffffffffu, incl, 31);
      const uint32_t pairs = (tot & 0x00ff00ffu) + ((tot >> 8) & 0x00ff00ffu);
      const uint32_t step_total = (pairs & 0xffffu) + (pairs >> 16);
      if (cnt + step_total > kSlice) {
        over = true;
        break;
      }
      const uint32_t excl = incl - packed;
      uint32_t first = cnt;  // the slot of vector u's first entry over the warp
#pragma unroll
      for (int u = 0; u < U; ++u) {
        // One pointer per vector: the key slot, its position kCap words on.
        uint32_t* dst = sk + first + ((excl >> (8 * u)) & 0xffu);
        first += (tot >> (8 * u)) & 0xffu;
        const uint32_t p0 =
            4u * (w0 + (j * U + uint32_t(u)) * 32u + uint32_t(lane)) - uint32_t(g.mis);
        const float e[4] = {ring[d][u].x, ring[d][u].y, ring[d][u].z, ring[d][u].w};
#pragma unroll
        for (int q = 0; q < 4; ++q)
          if (enter >> (8 * u + q) & 1u)
            dst[0] = __float_as_uint(e[q]), dst[T::kCap] = p0 + q, ++dst;
      }
      cnt += step_total;
      {
        // One pointer and one offset per step (immediate offsets per vector):
        // no per-vector address kept live across the loop.
        const uint32_t jn = (j + D) * (U * 32u);
        const float4* src = wvec + jn;
        const uint32_t rr = jn + uint32_t(lane) - r_lo;
        ldg_step<0>(ring[d], src, rr, r_n);
      }
    }
  }

  append_edges(f1, w1);

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
  // Each warp's min and max key to warp_a/b and hist cleared, for the rank
  // finish (count_linear_bins' range_ready): their readers in find_bin passed
  // its last barrier.
  const uint32_t start = __shfl_sync(0xffffffffu, incl - c, warp);
  uint32_t lo = 0xffffffffu, hi = 0u;
  for (uint32_t i = lane; i < cnt; i += 32) {
    const uint32_t key = topk_key(__uint_as_float(sk[i]));
    lo = min(lo, key), hi = max(hi, key);
    s.key2[start + i] = key, s.pos2[start + i] = sp[i];
  }
  lo = __reduce_min_sync(0xffffffffu, lo), hi = __reduce_max_sync(0xffffffffu, hi);
  if (lane == 0) s.warp_a[warp] = lo, s.warp_b[warp] = hi;
  for (int i = tid; i < T::kBins; i += T::kThreads) s.hist[i] = 0u;
  __syncthreads();
  *fill = total;
  return true;
}

}  // namespace mla::cuda::topk
