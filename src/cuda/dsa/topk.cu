// Token top-k by radix select (DESIGN.md section 1: S_t = top-k(I[t, :])).
//
// Four versions, one result (TopkParams::algo: 1 is the default, see
// topk_launch.hpp for why; 2, 3 and 4 are selectable, and v1 is their fallback). In all, a row is
// handled by a cluster of CS CTAs (CS = 1 when rows fill the GPU; a long row among few rows is
// split over 2-8 CTAs), each owning a contiguous segment of the row; logits are mapped to
// order-preserving 32-bit keys (topk_key).
//
// v3 (topk_stream_kernel<true, false>): one read. Every CTA of the cluster draws the
// same 2048 elements of the row and takes K = the key that ~min(2k, (k +
// pool) / 2) elements of the row are expected to reach; the segment streams
// once through the bulk-copy ring below and every element >= K goes to the
// CTA's pool. When the cluster caught at least k (or K took every candidate)
// and the catch fits one pool, the top k are the pool's top k: the CTAs copy
// their entries to the leader (rank r % CS), which finds the k-th key with
// local digit rounds, sorts the k (+ ties) in registers and writes them.
// Otherwise the cluster runs v1. Measured on the H200 (perf-log "Top-k v2"):
// faster than v1 on every benchmark shape; collecting in the streaming loop,
// not reading, is what its time goes to.
//
// v4 (topk_stream_kernel<true, true>, algo 4): v3 with the collect of the
// pass rebuilt, the part of v3's time that reading does not explain (perf-log
// "Top-k v2", run 3: the pass 91.5 us against 38.5 for a histogram pass).
// v3 places each hit through a 5-step shuffle scan and a returning atomic on
// the CTA's one fill counter per warp and chunk, and the ring refills a stage
// only when the slowest warp is done with it, so that latency adds to every
// chunk. v4's warps append to their own slice of the pool (pool / 16 pairs)
// at a count kept in a register, places from 4 ballots: no atomic, no scan.
// After the pass the leader moves its slices together in place and the
// others copy theirs to the leader slice by slice; a slice that overflowed
// sends the cluster to the fallback, as a full pool does.
//
// v2 (topk_stream_kernel<false, false>). The segment is streamed twice through a ring of
// kStages bulk copies (TMA, one mbarrier per stage), so up to 32 KB per CTA are
// in flight whatever the threads are doing: v1's register loads left the
// memory idle while each thread's 16 values went through their atomics.
//   pass 1   histogram of the first digit; the digit B1 holding the k-th
//            largest gives exactly W (elements above B1) and C (in B1). The
//            first copies of pass 2 are in flight during this exchange;
//   pass 2   (chunks in reverse order: the last ones read by pass 1 are the
//            likeliest still in L2) every element at or above B1 goes straight
//            to the cluster leader's pool as (key, position), at an offset
//            known from the per-CTA counts (one shared atomic per warp);
//   leader   finds the k-th key in the pool with two local digit rounds (bits
//            19-0), sorts the k (+ ties) in registers by descending key, then
//            ascending position (the whole pool in shared memory when they are
//            more than 2048), and writes the first k (leader_finish, shared
//            with v3).
// When W + C exceeds the pool (most of a row in one 12-bit bucket, heavy
// ties), the cluster drains its copies and runs v1 from the start.
//
// v1 (topk_kernel). The k-th largest key T is found in three digit rounds
// (12, 10, 10 bits); the row is read twice (16-byte loads, several in flight
// per thread):
//   pass 1   histogram of the top 12 bits; the digit B1 is found;
//   pass 2   every element above B1 is a winner: its (key, position) goes
//            straight to the cluster leader's sort buffer; the elements of B1
//            are gathered (key, position) into shared memory;
//   rounds 2, 3 on the gathered candidates only, then their winners (> T) and
//            their ties (== T) join the sort buffer.
// The leader sorts the buffer in shared memory (bitonic, sort_and_write) by
// descending key, then ascending position. Ties at T are all added and the sort
// keeps the lowest positions, so the buffer holds k + (ties not taken)
// entries; it is sized 2 * pow2(k).
// Fallbacks (slower, same result): when a CTA's candidates overflow its
// buffer, later rounds re-read the segment; when they overflow or the ties do
// not fit the sort buffer, an ordered pass over the row (a block-wide scan:
// index = #greater before p + min(#equal before p, still needed)) places
// exactly the k chosen. -inf and NaN map to key 0 and are never candidates;
// when a row has at most k candidates, T = 0 and all of them are taken.
#include <cooperative_groups.h>

#include <algorithm>
#include <cstddef>

#include "cuda/common/mbarrier.cuh"
#include "cuda/dsa/dsa_device.cuh"
#include "cuda/dsa/topk_launch.hpp"

namespace cg = cooperative_groups;

namespace mla::cuda::dsa {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kBins1 = 4096;    // round 1: bits [31:20]
constexpr int kBins = 1024;     // rounds 2, 3: bits [19:10], [9:0]
constexpr int kCandCap = 5120;  // keeps 2 CTAs per SM at k <= 2048
constexpr int kUnroll = 4;
constexpr int kTopkMaxK = 8192;
static_assert(kBins1 % kThreads == 0 && kBins % kThreads == 0, "bins split evenly over threads");
// v2's ring: kStages copies of one float4 per thread each (8 KB), so a
// thread waits on one barrier per float4 and 32 KB per CTA (64 KB per SM at 2
// CTAs) can be in flight, above what ~4.4 TB/s x ~1 us of latency needs.
constexpr int kStages = 4;
constexpr int kChunkVecs = kThreads;
constexpr uint32_t kChunkBytes = kChunkVecs * 16;
// v2's pool (pairs): room for W + C at k 2048 when the first digit's bucket
// holds 1/32 of the row (uniform logits over [-1, 1): 4096 of 128K).
constexpr uint32_t kMinPool = 8192;
// v4's pool slices: kWarps of pool / kWarps pairs; a thread moves at most
// kSliceRegs pairs of a slice (the pool is 2 * kTopkMaxK pairs at most).
constexpr int kSliceRegs = 2 * kTopkMaxK / kWarps / kThreads;
static_assert(kSliceRegs >= 1 && kMinPool % kWarps == 0, "whole slices, each moved in registers");
// v2's final sort when the k chosen (and their ties) fit: kRegSortPer pairs
// per thread in registers, so only the stages with strides of 32 threads or
// more touch shared memory (the all-shared-memory sort moves n log^2 n / 2
// pairs through it: ~150 us for 8192 pairs in the first v2 run).
constexpr int kRegSortPer = 4;
constexpr uint32_t kRegSortN = kThreads * kRegSortPer;

// v1: followed in dynamic shared memory by the sort buffer: (key << 32 |
// ~position) pairs, 2 * pow2(k) of them (only the leader's is used).
// v2: the arrays (from hist on) and beyond are the leader's pool once the
// first digit is known; the ring follows the pool.
struct TopkSmem {
  uint64_t full[kStages], empty[kStages];  // v2: ring stage copied / consumed by every warp
  uint32_t scan_gt[kUnroll * kWarps];
  uint32_t scan_eq[kUnroll * kWarps];
  uint32_t warp_part[kWarps];
  uint32_t num_cand;
  uint32_t found_bin, found_remaining;
  uint32_t local_gt, local_eq;  // this CTA's elements > T and == T (read by the cluster)
  uint32_t local_gt1;           // of those, above the first digit B1 (read by the cluster)
  uint32_t emitted[3];          // pass-2 winners, candidates > T, == T placed so far
  uint32_t pool_fill;           // v2: entries this CTA has put in the leader's pool so far
  uint32_t sort_fill;           // v2, leader: entries gathered for the register sort so far
  uint32_t counts[8];           // v2: pool entries of each CTA of the cluster (written by each)
  uint32_t warp_fill[kWarps];   // v4: entries each warp put in its slice of the pool
  alignas(16) uint32_t hist[kBins1];  // this CTA's histogram (read by the cluster)
  struct {
    uint32_t total[kBins1];  // the cluster's sum
    uint32_t cand_key[kCandCap];
    int32_t cand_pos[kCandCap];
  } sel;
};

uint32_t pow2_at_least(uint32_t x) {
  uint32_t n2 = 1;
  while (n2 < x) n2 <<= 1;
  return n2;
}
uint32_t sort_capacity(int k) {
  return 2 * pow2_at_least(uint32_t(k));
}
constexpr size_t kSortOffset = (sizeof(TopkSmem) + 15) & ~size_t(15);  // 8-byte pairs: aligned
size_t topk_smem_bytes(int k) {
  return kSortOffset + sizeof(uint64_t) * sort_capacity(k);
}

constexpr size_t kPoolOffset = offsetof(TopkSmem, hist);
uint32_t pool_capacity(int k) {
  return std::max(kMinPool, sort_capacity(k));
}  // a power of two
size_t ring_offset(int k) {
  const size_t pool_end =
      kPoolOffset + std::max(sizeof(TopkSmem) - kPoolOffset, sizeof(uint64_t) * pool_capacity(k));
  return (pool_end + 127) & ~size_t(127);
}
// v2 runs v1 as its fallback in the same shared memory.
size_t stream_smem_bytes(int k) {
  return std::max(topk_smem_bytes(k), ring_offset(k) + kStages * kChunkBytes);
}

// Calls fn(position, value) for every position of [s0, s1): scalars up to the
// first 16-byte boundary, then float4 vectors, kUnroll per thread in flight.
template <class Fn>
__device__ __forceinline__ void for_each_logit(const float* row, int64_t s0, int64_t s1, Fn&& fn) {
  const int64_t mis = int64_t(reinterpret_cast<uintptr_t>(row + s0) >> 2) & 3;
  const int64_t head = min64(s1 - s0, mis ? 4 - mis : 0);
  if (threadIdx.x < head) fn(s0 + threadIdx.x, row[s0 + threadIdx.x]);
  const int64_t b0 = s0 + head;
  const int64_t nvec = max64(0, s1 - b0) / 4;
  const float4* v = reinterpret_cast<const float4*>(row + b0);
  for (int64_t i = threadIdx.x; i < nvec; i += kThreads * kUnroll) {
    float4 x[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t j = i + u * kThreads;
      x[u] = j < nvec ? v[j] : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t j = i + u * kThreads;
      if (j < nvec) {
        const int64_t p = b0 + 4 * j;
        fn(p, x[u].x), fn(p + 1, x[u].y), fn(p + 2, x[u].z), fn(p + 3, x[u].w);
      }
    }
  }
  const int64_t t0 = b0 + nvec * 4;
  if (threadIdx.x < s1 - t0) fn(t0 + threadIdx.x, row[t0 + threadIdx.x]);
}

// The row a cluster of cs CTAs works on (row r = blockIdx.x / cs), its valid
// length n (device lengths are not host-checked: clamped to [0, width]) and
// this CTA's contiguous segment [s0, s1) of it.
struct RowSegment {
  int64_t r, n, s0, s1;
  const float* row;
  int32_t* out;
};
__device__ __forceinline__ RowSegment row_segment(const TopkParams& p, int cs, int rank) {
  RowSegment g;
  g.r = blockIdx.x / cs;
  g.row = p.logits + g.r * p.logits_stride;
  g.out = p.out + g.r * p.out_stride;
  g.n = min64(p.width, max64(0, p.lengths ? p.lengths[g.r] : p.width));
  const int64_t seg = (g.n + cs - 1) / cs;
  g.s0 = min64(g.n, rank * seg);
  g.s1 = min64(g.n, (rank + 1) * seg);
  return g;
}

__device__ __forceinline__ uint64_t sort_pair(uint32_t key, int64_t pos) {
  return (uint64_t(key) << 32) | uint64_t(~uint32_t(pos));
}

__device__ __forceinline__ int32_t translate(const TopkParams& p, int64_t r, int64_t pos) {
  if (!p.block_table) return int32_t(pos);
  const int64_t b = r / p.rows_per_request;
  const int32_t page = p.block_table[b * p.block_table_stride + pos / p.page_size];
  return page * p.page_size + int32_t(pos % p.page_size);
}

// Exclusive sum over threads of v (thread order), and the block total.
__device__ __forceinline__ uint32_t block_exclusive_sum(uint32_t v, uint32_t* warp_part,
                                                        uint32_t* total) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  uint32_t incl = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t n = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += n;
  }
  if (lane == 31) warp_part[warp] = incl;
  __syncthreads();
  uint32_t before = 0, all = 0;
  for (int w = 0; w < kWarps; ++w) {
    const uint32_t x = warp_part[w];
    before += w < warp ? x : 0;
    all += x;
  }
  __syncthreads();
  *total = all;
  return before + incl - v;
}

// Over bins [0, nbins) (counts in `tot`, larger bin = larger key): the bin B
// with (count above B) < need <= (count at or above B). Writes B and
// need - (count above B) to smem. Every thread of the block must call.
__device__ void find_digit(const uint32_t* tot, int nbins, uint32_t need, TopkSmem& s) {
  const int per = nbins / kThreads;
  // Thread i owns bins from the top: thread 0 the highest `per` bins.
  const int hi_bin = nbins - 1 - threadIdx.x * per;
  uint32_t mine = 0;
  for (int j = 0; j < per; ++j) mine += tot[hi_bin - j];
  uint32_t all;
  uint32_t above = block_exclusive_sum(mine, s.warp_part, &all);
  if (above < need && need <= above + mine) {
    for (int j = 0; j < per; ++j) {
      const uint32_t c = tot[hi_bin - j];
      if (need <= above + c) {
        s.found_bin = uint32_t(hi_bin - j);
        s.found_remaining = need - above;
        break;
      }
      above += c;
    }
  }
  __syncthreads();
}

// s.sel.total[b] = the sum of bin b of the cluster's histograms, b < nbins.
// Every histogram must be complete (a cluster.sync before).
__device__ void sum_cluster_hist(cg::cluster_group& cluster, int cs, int nbins, TopkSmem& s) {
  for (int b = threadIdx.x; b < nbins; b += kThreads) {
    uint32_t sum = 0;
    for (int r = 0; r < cs; ++r) sum += cluster.map_shared_rank(s.hist, r)[b];
    s.sel.total[b] = sum;
  }
}

// Adds this CTA's count of elements in bins above B to *count (shared).
__device__ void add_count_above(const uint32_t* hist, int nbins, uint32_t B, uint32_t* count) {
  uint32_t gt = 0;
  for (int b = threadIdx.x; b < nbins; b += kThreads) gt += uint32_t(b) > B ? hist[b] : 0u;
  if (gt) atomicAdd(count, gt);
}

// Sum the cluster's histograms into s.total, find the digit, and add this CTA's
// count of elements in bins above it to s.local_gt.
__device__ void reduce_and_find(cg::cluster_group& cluster, int cs, int nbins, uint32_t need,
                                TopkSmem& s) {
  cluster.sync();  // every CTA's histogram is complete
  sum_cluster_hist(cluster, cs, nbins, s);
  cluster.sync();  // nobody reads my histogram any more
  find_digit(s.sel.total, nbins, need, s);
  add_count_above(s.hist, nbins, s.found_bin, &s.local_gt);
  __syncthreads();
}

// The leader's last step: sorts buf[0, n) descending (key, then lower
// position), and writes the first k positions of row r, translated; -1 from
// `chosen` on. buf has room for pow2(n) pairs.
__device__ __forceinline__ void sort_and_write(uint64_t* buf, uint32_t n, uint32_t chosen,
                                               const TopkParams& p, int64_t r, int32_t* out) {
  uint32_t n2 = 1;
  while (n2 < n) n2 <<= 1;
  for (uint32_t i = n + threadIdx.x; i < n2; i += kThreads) buf[i] = 0;  // sorts last
  __syncthreads();
  for (uint32_t size = 2; size <= n2; size <<= 1) {
    for (uint32_t stride = size / 2; stride > 0; stride >>= 1) {
      for (uint32_t i = threadIdx.x; i < n2 / 2; i += kThreads) {
        const uint32_t lo = 2 * i - (i & (stride - 1)), hi = lo + stride;
        const bool desc = (lo & size) == 0;
        const uint64_t a = buf[lo], b = buf[hi];
        if ((a < b) == desc) buf[lo] = b, buf[hi] = a;
      }
      __syncthreads();
    }
  }
  for (uint32_t i = threadIdx.x; i < uint32_t(p.k); i += kThreads)
    out[i] = i < chosen ? translate(p, r, int64_t(~uint32_t(buf[i]))) : -1;
}

__device__ __forceinline__ uint64_t shfl_xor_u64(uint64_t v, int mask) {
  const uint32_t lo = __shfl_xor_sync(0xffffffffu, uint32_t(v), mask);
  const uint32_t hi = __shfl_xor_sync(0xffffffffu, uint32_t(v >> 32), mask);
  return (uint64_t(hi) << 32) | lo;
}

// The bitonic network of sort_and_write over kRegSortN pairs (descending),
// thread t holding pairs [kRegSortPer t, kRegSortPer (t + 1)) in v: strides
// below kRegSortPer inside the thread, up to 32 threads by shuffles, larger
// ones through buf (kRegSortN pairs of shared scratch). Same comparisons, so
// the same order.
__device__ __forceinline__ void bitonic_sort_regs(uint64_t (&v)[kRegSortPer], uint64_t* buf) {
  const uint32_t i0 = threadIdx.x * kRegSortPer;  // index of v[0]
  for (uint32_t size = 2; size <= kRegSortN; size <<= 1) {
    uint32_t stride = size / 2;
    if (stride >= 32 * kRegSortPer) {
#pragma unroll
      for (int j = 0; j < kRegSortPer; ++j) buf[i0 + j] = v[j];
      __syncthreads();
      for (; stride >= 32 * kRegSortPer; stride >>= 1) {
        for (uint32_t i = threadIdx.x; i < kRegSortN / 2; i += kThreads) {
          const uint32_t lo = 2 * i - (i & (stride - 1)), hi = lo + stride;
          const bool desc = (lo & size) == 0;
          const uint64_t a = buf[lo], b = buf[hi];
          if ((a < b) == desc) buf[lo] = b, buf[hi] = a;
        }
        __syncthreads();
      }
#pragma unroll
      for (int j = 0; j < kRegSortPer; ++j)
        v[j] = buf[i0 + j];  // own pairs: rewritten only by this thread
    }
    for (; stride >= kRegSortPer; stride >>= 1) {
#pragma unroll
      for (int j = 0; j < kRegSortPer; ++j) {
        const uint64_t o = shfl_xor_u64(v[j], int(stride / kRegSortPer));
        const uint32_t i = i0 + j;
        // The lower index of a descending pair keeps the larger, as the upper
        // index of an ascending one does.
        const bool keep_max = ((i & stride) == 0) == ((i & size) == 0);
        v[j] = keep_max ? (v[j] > o ? v[j] : o) : (v[j] < o ? v[j] : o);
      }
    }
    // Compile-time strides (the loop unrolls), so v stays in registers.
#pragma unroll
    for (int st = kRegSortPer / 2; st >= 1; st >>= 1) {
      if (uint32_t(st) >= size) continue;
#pragma unroll
      for (int j = 0; j < kRegSortPer; ++j) {
        const int jp = j ^ st;
        if (jp > j && (v[j] < v[jp]) == (((i0 + j) & size) == 0)) {
          const uint64_t t = v[j];
          v[j] = v[jp], v[jp] = t;
        }
      }
    }
  }
}

// topk_key(x) >= K for a fixed K >= 1, on the raw bits of x (NaN and -inf
// never pass, -0 passes with +0): 4-5 instructions where topk_key takes ~10,
// for the streaming passes that test every element and compute the key of
// the few that pass only.
struct KeyAtLeast {
  uint32_t pos_lo, neg_lim;
  __device__ explicit KeyAtLeast(uint32_t K) {
    K = max(K, 0x00800000u);  // no key between 0 and -FLT_MAX's: -inf and NaN stay out
    if (K > 0x80000000u) {    // positives from K's on, no negative, no zero
      pos_lo = K & 0x7fffffffu, neg_lim = 0x7fffffffu;
    } else {  // every positive; the negatives with ~u >= K, -0 included (key(-0) = key(+0))
      pos_lo = 0, neg_lim = K == 0x80000000u ? 0x80000000u : ~K;
    }
  }
  __device__ bool operator()(float x) const {
    const uint32_t u = __float_as_uint(x);
    return int32_t(u) >= 0 ? u - pos_lo <= 0x7f800000u - pos_lo : u <= neg_lim;
  }
};

// The digit rounds over pool[0, n) (pairs key << 32 | ~position) below the
// known top `known` bits (== prefix) of the key: they find the need-th
// largest key T among the entries carrying the prefix (12 bits first when
// nothing is known, then 10). Returns T; *need_at = how many of T's ties
// belong to the need (need - entries above T), *ties = entries equal to T.
// hist: 4096 bins of shared scratch. Every thread of the block calls.
__device__ uint32_t pool_find_kth(const uint64_t* pool, uint32_t n, uint32_t prefix, int known,
                                  uint32_t need, uint32_t* hist, TopkSmem& s, uint32_t* need_at,
                                  uint32_t* ties) {
  uint32_t bin = 0;
  for (int width = 12; known < 32; known += width) {
    width = known == 0 ? 12 : 10;
    const int shift = 32 - known - width, nbins = 1 << width;
    for (int b = threadIdx.x; b < nbins; b += kThreads) hist[b] = 0;
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < n; i += kThreads) {
      const uint32_t key = uint32_t(pool[i] >> 32);
      if (known == 0 || (key >> (32 - known)) == prefix)
        atomicAdd(&hist[(key >> shift) & uint32_t(nbins - 1)], 1u);
    }
    __syncthreads();
    find_digit(hist, nbins, need, s);
    bin = s.found_bin;
    prefix = (prefix << width) | bin;
    need = s.found_remaining;
  }
  *need_at = need;
  *ties = hist[bin];
  return prefix;
}

// The leader's end (v2, v3): pool[0, n) holds every key >= some bound below
// the k-th largest. When select and n > k, T (the k-th largest) comes from
// pool_find_kth (known top bits `prefix`, `need` of their entries in the top
// k); the m entries >= T (the k - need_at above T, all of T's ties) are
// gathered and sorted in registers when m <= kRegSortN, else the pool is
// sorted in shared memory; the first k are written, -1 from `chosen` on.
// scratch: 32 KB of shared memory nobody else uses (4096 bins, kRegSortN
// pairs).
__device__ __forceinline__ void leader_finish(uint64_t* pool, uint32_t n, bool select,
                                              uint32_t prefix, int known, uint32_t need,
                                              uint32_t chosen, uint8_t* scratch, TopkSmem& s,
                                              const TopkParams& p, int64_t r, int32_t* out,
                                              bool smem_sort) {
  uint32_t* hist = reinterpret_cast<uint32_t*>(scratch);
  uint64_t* sortbuf = reinterpret_cast<uint64_t*>(scratch + kBins1 * sizeof(uint32_t));
  static_assert(kBins1 * 4 + kRegSortN * 8 <= kStages * kChunkBytes,
                "the bins and the sort buffer fit in the ring");
  const uint32_t k = uint32_t(p.k), lane = threadIdx.x % 32;
  uint32_t T = 0, m = n;  // the sort needs the m pool entries with key >= T
  if (!smem_sort && select && n > k) {
    uint32_t need_at = 0, ties = 0;
    T = pool_find_kth(pool, n, prefix, known, need, hist, s, &need_at, &ties);
    m = (k - need_at) + ties;
  }
  if (smem_sort || m > kRegSortN) {
    sort_and_write(pool, n, chosen, p, r, out);
    return;
  }
  // Gather the m entries >= T (any order: the sort orders them), pad with 0.
  for (uint32_t i0 = 0; i0 < n; i0 += kThreads) {
    const uint32_t i = i0 + threadIdx.x;
    const uint64_t e = i < n ? pool[i] : 0;
    const bool take = i < n && uint32_t(e >> 32) >= T;
    const uint32_t ballot = __ballot_sync(0xffffffffu, take);
    uint32_t at = 0;
    if (lane == 0 && ballot) at = atomicAdd(&s.sort_fill, __popc(ballot));
    at = __shfl_sync(0xffffffffu, at, 0) + __popc(ballot & ((1u << lane) - 1u));
    if (take && at < kRegSortN) sortbuf[at] = e;
  }
  for (uint32_t i = m + threadIdx.x; i < kRegSortN; i += kThreads) sortbuf[i] = 0;  // sorts last
  __syncthreads();
  uint64_t v[kRegSortPer];
#pragma unroll
  for (int j = 0; j < kRegSortPer; ++j) v[j] = sortbuf[threadIdx.x * kRegSortPer + j];
  __syncthreads();  // sortbuf is the sort's scratch from here
  bitonic_sort_regs(v, sortbuf);
#pragma unroll
  for (int j = 0; j < kRegSortPer; ++j) {
    const uint32_t i = threadIdx.x * kRegSortPer + j;
    if (i < k) out[i] = i < chosen ? translate(p, r, int64_t(~uint32_t(v[j]))) : -1;
  }
}

// v1's whole selection for the row of this cluster (the body of topk_kernel,
// and topk_stream_kernel's fallback).
__device__ __forceinline__ void topk_three_pass(const TopkParams& p, int cs, uint32_t sort_cap,
                                                uint8_t* smem_raw) {
  TopkSmem& s = *reinterpret_cast<TopkSmem*>(smem_raw);
  uint64_t* sorted = reinterpret_cast<uint64_t*>(smem_raw + kSortOffset);
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = int(cluster.block_rank());
  const RowSegment rs = row_segment(p, cs, rank);
  const int64_t r = rs.r, s0 = rs.s0, s1 = rs.s1;
  const float* row = rs.row;
  int32_t* out = rs.out;
  const uint32_t k = uint32_t(p.k);
  uint64_t* leader_sorted = cluster.map_shared_rank(sorted, 0);

  // ---- pass 1: top 12 bits over the segment ----
  for (int b = threadIdx.x; b < kBins1; b += kThreads) s.hist[b] = 0;
  if (threadIdx.x == 0) {
    s.num_cand = 0, s.local_gt = 0, s.local_eq = 0, s.local_gt1 = 0;
    s.emitted[0] = s.emitted[1] = s.emitted[2] = 0;
  }
  __syncthreads();
  if (p.timing_variant == 2) {  // same atomics, no two lanes of a warp on one bin
    for_each_logit(row, s0, s1, [&](int64_t, float v) {
      atomicAdd(&s.hist[((topk_key(v) >> 20) & ~31u) | (threadIdx.x & 31)], 1u);
    });
  } else {
    for_each_logit(row, s0, s1,
                   [&](int64_t, float v) { atomicAdd(&s.hist[topk_key(v) >> 20], 1u); });
  }
  if (p.timing_variant == 1 || p.timing_variant == 2) {
    if (threadIdx.x == 0 && s.hist[0] == 0xffffffffu) out[0] = 0;  // keeps the pass alive
    return;
  }
  cluster.sync();
  // Candidates: everything outside bin 0 (key 0 = -inf/NaN; no finite value
  // has a key below 2^20). With at most k of them, all are taken (T = 0).
  uint32_t cand_total = 0, cand_local = 0;
  {
    uint32_t mine = 0, local = 0;
    for (int b = threadIdx.x + (threadIdx.x == 0 ? kThreads : 0); b < kBins1; b += kThreads) {
      local += s.hist[b];
      for (int q = 0; q < cs; ++q) mine += cluster.map_shared_rank(s.hist, q)[b];
    }
    block_exclusive_sum(mine, s.warp_part, &cand_total);
    block_exclusive_sum(local, s.warp_part, &cand_local);
  }
  const bool select = cand_total > k;  // else every candidate is taken
  uint32_t B1 = 0, need = 0;
  if (select) {
    reduce_and_find(cluster, cs, kBins1, k, s);  // s.local_gt = my elements above B1
    B1 = s.found_bin;
    need = s.found_remaining;
  } else if (threadIdx.x == 0) {
    s.local_gt = cand_local;
  }
  __syncthreads();
  if (threadIdx.x == 0) s.local_gt1 = s.local_gt;
  cluster.sync();  // every CTA's local_gt1 is final
  uint32_t gt1_before = 0, gt1_total = 0;
  for (int q = 0; q < cs; ++q) {
    const uint32_t g = cluster.map_shared_rank(&s, q)->local_gt1;
    gt1_before += q < rank ? g : 0u;
    gt1_total += g;
  }

  // ---- pass 2: winners above B1 to the leader, candidates of B1 gathered ----
  for_each_logit(row, s0, s1, [&](int64_t i, float v) {
    const uint32_t key = topk_key(v);
    const uint32_t bin = key >> 20;
    if (bin > B1) {
      leader_sorted[gt1_before + atomicAdd(&s.emitted[0], 1u)] = sort_pair(key, i);
    } else if (select && bin == B1) {
      const uint32_t at = atomicAdd(&s.num_cand, 1u);
      if (at < kCandCap) s.sel.cand_key[at] = key, s.sel.cand_pos[at] = int32_t(i);
    }
  });
  __syncthreads();
  if (p.timing_variant == 3) {
    cluster.sync();  // the leader's buffer is written remotely until here
    return;
  }

  uint32_t n_sort = cand_total;  // entries the leader sorts
  const uint32_t chosen = select ? k : cand_total;
  if (select) {
    uint32_t prefix = B1;  // the digits of T found so far
    const uint32_t num_cand = s.num_cand;
    const bool in_smem = num_cand <= kCandCap;
    // Every key of the current digit prefix, from shared memory or (overflow) the row.
    auto for_each_candidate = [&](int prefix_shift, auto&& fn) {
      if (in_smem) {
        for (uint32_t c = threadIdx.x; c < num_cand; c += kThreads) {
          const uint32_t key = s.sel.cand_key[c];
          if ((key >> prefix_shift) == prefix) fn(key);
        }
      } else {
        for (int64_t i = s0 + threadIdx.x; i < s1; i += kThreads) {
          const uint32_t key = topk_key(row[i]);
          if ((key >> prefix_shift) == prefix) fn(key);
        }
      }
    };

    // ---- rounds 2 and 3: 10 bits each ----
#pragma unroll 1
    for (int shift = 10; shift >= 0; shift -= 10) {
      for (int b = threadIdx.x; b < kBins; b += kThreads) s.hist[b] = 0;
      __syncthreads();
      for_each_candidate(
          shift + 10, [&](uint32_t key) { atomicAdd(&s.hist[(key >> shift) & (kBins - 1)], 1u); });
      reduce_and_find(cluster, cs, kBins, need, s);
      if (shift == 0 && threadIdx.x == 0) s.local_eq = s.hist[s.found_bin];
      prefix = (prefix << 10) | s.found_bin;
      need = s.found_remaining;
    }
    const uint32_t T = prefix;  // the k-th largest key; `need` of the keys == T are taken

    // ---- exchange counts; choose the placement ----
    cluster.sync();
    uint32_t gt_before = 0, eq_before = 0, gt2_before = 0, gt2_total = 0, eq_total = 0;
    bool overflow = false;
    for (int q = 0; q < cs; ++q) {
      const TopkSmem* o = cluster.map_shared_rank(&s, q);
      const uint32_t gt = o->local_gt, eq = o->local_eq, gt2 = gt - o->local_gt1;
      if (q < rank) gt_before += gt, eq_before += eq, gt2_before += gt2;
      gt2_total += gt2, eq_total += eq;
      overflow |= o->num_cand > kCandCap;
    }
    const bool ordered = overflow || k - need + eq_total > sort_cap;
    n_sort = ordered ? k : k - need + eq_total;
    cluster.sync();  // remote reads done

    if (!ordered) {
      // ---- the candidates' winners and every tie join the sort buffer ----
      for (uint32_t c = threadIdx.x; c < num_cand; c += kThreads) {
        const uint32_t key = s.sel.cand_key[c];
        if (key > T)
          leader_sorted[gt1_total + gt2_before + atomicAdd(&s.emitted[1], 1u)] =
              sort_pair(key, s.sel.cand_pos[c]);
        else if (key == T)
          leader_sorted[gt1_total + gt2_total + eq_before + atomicAdd(&s.emitted[2], 1u)] =
              sort_pair(key, s.sel.cand_pos[c]);
      }
    } else {
      // ---- ordered pass: exactly the k chosen, each at its index ----
      const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
      const uint32_t lt_mask = (1u << lane) - 1u;
      for (int64_t c0 = s0; c0 < s1; c0 += kThreads * kUnroll) {
        bool gt[kUnroll], eq[kUnroll];
        uint32_t gm[kUnroll], em[kUnroll], key[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t j = c0 + u * kThreads + threadIdx.x;
          key[u] = j < s1 ? topk_key(row[j]) : 0u;
          gt[u] = key[u] > T;
          eq[u] = key[u] == T;
          gm[u] = __ballot_sync(0xffffffffu, gt[u]);
          em[u] = __ballot_sync(0xffffffffu, eq[u]);
          if (lane == 0)
            s.scan_gt[u * kWarps + warp] = __popc(gm[u]),
                                   s.scan_eq[u * kWarps + warp] = __popc(em[u]);
        }
        __syncthreads();
        if (warp == 0) {  // exclusive scan of the kUnroll * kWarps = 64 entries, 2 per lane
          static_assert(kUnroll * kWarps == 64, "one warp scans two entries per lane");
          const uint32_t a0 = s.scan_gt[2 * lane], a1 = s.scan_gt[2 * lane + 1];
          const uint32_t e0 = s.scan_eq[2 * lane], e1 = s.scan_eq[2 * lane + 1];
          uint32_t ia = a0 + a1, ie = e0 + e1;
#pragma unroll
          for (int o = 1; o < 32; o <<= 1) {
            const uint32_t na = __shfl_up_sync(0xffffffffu, ia, o),
                           ne = __shfl_up_sync(0xffffffffu, ie, o);
            if (lane >= o) ia += na, ie += ne;
          }
          const uint32_t xa = ia - a0 - a1, xe = ie - e0 - e1;
          s.scan_gt[2 * lane] = xa, s.scan_gt[2 * lane + 1] = xa + a0;
          s.scan_eq[2 * lane] = xe, s.scan_eq[2 * lane + 1] = xe + e0;
          if (lane == 31) s.warp_part[0] = ia, s.warp_part[1] = ie;  // the chunk's totals
        }
        __syncthreads();
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          if (!(gt[u] || eq[u])) continue;
          const uint32_t g_before =
              gt_before + s.scan_gt[u * kWarps + warp] + __popc(gm[u] & lt_mask);
          const uint32_t e_before =
              eq_before + s.scan_eq[u * kWarps + warp] + __popc(em[u] & lt_mask);
          if (eq[u] && e_before >= need) continue;
          leader_sorted[g_before + min(e_before, need)] =
              sort_pair(key[u], c0 + u * kThreads + threadIdx.x);
        }
        gt_before += s.warp_part[0];
        eq_before += s.warp_part[1];
        __syncthreads();  // scan arrays are rewritten by the next chunk
      }
    }
  }
  cluster.sync();  // every pair has landed at the leader
  if (rank != 0) return;

  sort_and_write(sorted, n_sort, chosen, p, r, out);
}

__global__ void __launch_bounds__(kThreads, 2)
    topk_kernel(TopkParams p, int cs, uint32_t sort_cap) {
  extern __shared__ __align__(16) uint8_t smem_raw[];
  topk_three_pass(p, cs, sort_cap, smem_raw);
}

// Samples per row for v3's threshold, and a hash for their jitter.
constexpr int kSample = 2048;
__device__ __forceinline__ uint32_t sample_hash(uint32_t j) {
  j *= 0x9E3779B1u;
  return j ^ (j >> 15);
}

// v2 (kSampled false), v3 (kSampled true) and v4 (kSampled and kWarpSlices),
// see the top of the file.
template <bool kSampled, bool kWarpSlices>
__global__ void __launch_bounds__(kThreads, 2)
    topk_stream_kernel(TopkParams p, int cs, uint32_t sort_cap, uint32_t pool_cap,
                       uint32_t ring_off) {
  using ptx::cp_async_bulk_g2s;
  using ptx::mbar_arrive;
  using ptx::mbar_arrive_expect_tx;
  using ptx::mbar_wait;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  TopkSmem& s = *reinterpret_cast<TopkSmem*>(smem_raw);
  uint64_t* pool = reinterpret_cast<uint64_t*>(s.hist);
  float4* ring = reinterpret_cast<float4*>(smem_raw + ring_off);
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = int(cluster.block_rank());
  const int lane = threadIdx.x % 32;
  const RowSegment rs = row_segment(p, cs, rank);
  const int64_t r = rs.r, n = rs.n, s0 = rs.s0, s1 = rs.s1;
  const float* row = rs.row;
  int32_t* out = rs.out;
  const uint32_t k = uint32_t(p.k);
  const int variant = p.timing_variant;
  // v3: the CTA that finishes the row alternates with the row: with 2 CTAs
  // per SM, rank 0 of two clusters would otherwise often share an SM.
  const int lead = kSampled && variant != 9 ? int(r % cs) : 0;
  // The segment: < 4 scalars up to a 16-byte boundary (head), nvec float4 in
  // chunks of kChunkVecs (the bulk copies), < 4 scalars (tail).
  const int64_t mis = int64_t(reinterpret_cast<uintptr_t>(row + s0) >> 2) & 3;
  const int64_t head = min64(s1 - s0, mis ? 4 - mis : 0);
  const int64_t b0 = s0 + head;
  const int64_t nvec = max64(0, s1 - b0) / 4;
  const int64_t t0 = b0 + 4 * nvec;
  const int nch = int((nvec + kChunkVecs - 1) / kChunkVecs);
  // Copies in one sequence c = 0 .. 2 nch - 1: pass 1's chunks in order, then
  // pass 2's (v2; reversed unless timing variant 4). Stage c % kStages; its
  // barriers complete once per use, so use c / kStages waits for parity
  // (c / kStages) & 1 (the empty barrier: the previous use's, which a fresh
  // barrier reports done).
  const bool pass1_only = kSampled || variant == 1 || variant == 6;
  const int issue_end = pass1_only ? nch : 2 * nch;
  const bool reverse2 = variant != 4;
  auto chunk_of = [&](int c) { return c < nch ? c : reverse2 ? 2 * nch - 1 - c : c - nch; };
  auto issue = [&](int c) {  // one thread
    const int st = c % kStages;
    mbar_wait(&s.empty[st], ((c / kStages) & 1) ^ 1);
    const int64_t v0 = int64_t(chunk_of(c)) * kChunkVecs;
    const uint32_t bytes = uint32_t(min64(kChunkVecs, nvec - v0)) * 16u;
    mbar_arrive_expect_tx(&s.full[st], bytes);
    if (!kSampled && variant == 5)  // pass 1's lines kept in L2 for pass 2, pass 2's let go
      cp_async_bulk_g2s(ring + st * kChunkVecs, row + b0 + 4 * v0, bytes, &s.full[st],
                        c < nch ? ptx::l2_policy_evict_last() : ptx::l2_policy_evict_first());
    else
      cp_async_bulk_g2s(ring + st * kChunkVecs, row + b0 + 4 * v0, bytes, &s.full[st]);
  };
  // fn(valid, position of x.x, x) on this thread's float4 of chunks [c0, c1);
  // thread 0 keeps the copies kStages - 1 chunks ahead. Every thread of the
  // block runs every iteration (fn may use warp collectives).
  auto stream = [&](int c0, int c1, auto&& fn) {
    for (int c = c0; c < c1; ++c) {
      if (threadIdx.x == 0 && c + kStages - 1 < issue_end) issue(c + kStages - 1);
      const int st = c % kStages;
      mbar_wait(&s.full[st], (c / kStages) & 1);
      const int64_t v = int64_t(chunk_of(c)) * kChunkVecs + threadIdx.x;
      const bool valid = v < nvec;
      const float4 x =
          valid ? ring[st * kChunkVecs + threadIdx.x] : make_float4(0.f, 0.f, 0.f, 0.f);
      fn(valid, b0 + 4 * v, x);
      __syncwarp();
      if (lane == 0) mbar_arrive(&s.empty[st]);
    }
  };
  // Waits for the copies of pass 2 issued during pass 1 (before a return or
  // the fallback: the ring must be quiet).
  auto drain = [&] {
    for (int c = nch; c < min(issue_end, nch + kStages - 1); ++c)
      mbar_wait(&s.full[c % kStages], (c / kStages) & 1);
    __syncthreads();
  };
  // Appends this thread's values e (bit e of hits) as (key, position) pairs to
  // dst[base + ...]; one shared atomic per warp, on this CTA's s.pool_fill.
  // The order does not matter (sorted later); entries from `limit` on are
  // counted, not written.
  auto emit = [&](uint64_t* dst, uint32_t base, uint32_t limit, uint32_t hits, const float(&val)[4],
                  const uint32_t(&pos)[4]) {
    if (!__any_sync(0xffffffffu, hits)) return;
    const uint32_t cnt = __popc(hits);
    uint32_t incl = cnt;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const uint32_t v = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += v;
    }
    uint32_t at = 0;
    if (lane == 31 && incl) at = atomicAdd(&s.pool_fill, incl);
    at = base + __shfl_sync(0xffffffffu, at, 31) + incl - cnt;
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if ((hits >> e) & 1u) {
        if (at < limit) dst[at] = sort_pair(topk_key(val[e]), pos[e]);
        ++at;
      }
  };
  // v4: appends this thread's values e (bit e of hits) to its warp's slice of
  // the pool, after the `fill` entries the warp put there so far (a register,
  // the same in every lane): each element's place comes from ballots (no
  // scan, no shared counter, no atomic to wait for). Entries from `cap` on are
  // counted, not written (the count tells the overflow).
  auto emit_slice = [&](uint64_t* slice, uint32_t& fill, uint32_t cap, uint32_t hits,
                        const float(&val)[4], const uint32_t(&pos)[4]) {
    if (!__any_sync(0xffffffffu, hits)) return;
    const uint32_t below = (1u << lane) - 1u;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const bool hit = (hits >> e) & 1u;
      const uint32_t ballot = __ballot_sync(0xffffffffu, hit);
      const uint32_t at = fill + __popc(ballot & below);
      if (hit && at < cap) slice[at] = sort_pair(topk_key(val[e]), pos[e]);
      fill += __popc(ballot);
    }
  };
  // A pass that hands every element passing `take` to append(hits, val, pos):
  // the head and tail scalars, then chunks [c0, c1).
  auto collect_with = [&](const KeyAtLeast& take, auto&& append, int c0, int c1) {
    {
      float val[4] = {0.f, 0.f, 0.f, 0.f};
      uint32_t pos[4] = {0, 0, 0, 0}, hits = 0;
      if (threadIdx.x < head) {
        val[0] = row[s0 + threadIdx.x], pos[0] = uint32_t(s0 + threadIdx.x);
        hits |= take(val[0]) ? 1u : 0u;
      }
      if (threadIdx.x < s1 - t0) {
        val[1] = row[t0 + threadIdx.x], pos[1] = uint32_t(t0 + threadIdx.x);
        hits |= take(val[1]) ? 2u : 0u;
      }
      append(hits, val, pos);
    }
    stream(c0, c1, [&](bool valid, int64_t p0, float4 x) {
      const float val[4] = {x.x, x.y, x.z, x.w};
      uint32_t pos[4], hits = 0;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        pos[e] = uint32_t(p0 + e);
        hits |= valid && take(val[e]) ? 1u << e : 0u;
      }
      append(hits, val, pos);
    });
  };
  // v2, v3: to dst[base + ...] through the CTA's shared counter (emit).
  auto collect = [&](const KeyAtLeast& take, uint64_t* dst, uint32_t base, uint32_t limit, int c0,
                     int c1) {
    collect_with(
        take,
        [&](uint32_t hits, const float(&val)[4], const uint32_t(&pos)[4]) {
          emit(dst, base, limit, hits, val, pos);
        },
        c0, c1);
  };

  if (!kSampled)
    for (int b = threadIdx.x; b < kBins1; b += kThreads) s.hist[b] = 0, s.sel.total[b] = 0;
  if (threadIdx.x == 0) {
    for (int st = 0; st < kStages; ++st)
      ptx::mbar_init(&s.full[st], 1), ptx::mbar_init(&s.empty[st], kWarps);
    ptx::mbar_fence_init();
    s.local_gt = 0, s.pool_fill = 0, s.sort_fill = 0;
  }
  __syncthreads();
  // The first half of a cluster barrier whose wait comes before this CTA first
  // touches another CTA's shared memory: a CTA of the cluster may only be
  // accessed once it is known to run (CUDA guide, distributed shared memory).
  // v2: it also says my totals are zeroed (the cluster adds into them after
  // pass 1). Nobody waits on it during the pass, so it costs nothing there.
  ptx::cluster_arrive();
  if (threadIdx.x == 0)
    for (int c = 0; c < kStages - 1 && c < issue_end; ++c) issue(c);

  if constexpr (kSampled) {
    // ---- v3: the threshold from a sample of the whole row, one pass ----
    // Every CTA of the cluster draws the same kSample elements (a jittered
    // grid over [0, n)) and takes K = the jt-th largest sample key, jt set so
    // that ~min(2k, (k + pool)/2) elements of the row are expected at or
    // above it; with n <= pool, K = 1 (every candidate).
    uint32_t K = 1;
    if (n > int64_t(pool_cap)) {
      uint64_t* sample = pool;  // the pool's memory is free until the pass
      uint32_t* shist = reinterpret_cast<uint32_t*>(pool + kSample);
      const int64_t span = n / kSample;
      for (int j = threadIdx.x; j < kSample; j += kThreads) {
        const int64_t at = int64_t(j) * n / kSample + int64_t(sample_hash(j) % uint64_t(span));
        sample[j] = uint64_t(topk_key(row[at])) << 32;
      }
      __syncthreads();
      const uint64_t want = std::min<uint64_t>(2ull * k, (uint64_t(k) + pool_cap) / 2);
      const uint32_t jt = uint32_t(
          std::min<uint64_t>(kSample, std::max<uint64_t>(1, (want * kSample + n - 1) / n)));
      uint32_t need_at = 0, ties = 0;
      K = max(1u, pool_find_kth(sample, kSample, 0, 0, jt, shist, s, &need_at, &ties));
      __syncthreads();  // the sample's memory is the pool from here
    }
    // ---- the pass: every key >= K to this CTA's pool ----
    // v4: warp w fills its own slice pool[w * slice_cap ...); the leader
    // compacts its slices in place before the counts barrier, the others copy
    // theirs slice by slice to the leader after it.
    [[maybe_unused]] const uint32_t slice_cap = pool_cap / kWarps, warp = threadIdx.x / 32;
    uint32_t n_mine = 0;
    if constexpr (kWarpSlices) {
      uint32_t fill = 0;
      uint64_t* slice = pool + warp * slice_cap;
      collect_with(
          KeyAtLeast(K),
          [&](uint32_t hits, const float(&val)[4], const uint32_t(&pos)[4]) {
            emit_slice(slice, fill, slice_cap, hits, val, pos);
          },
          0, nch);
      if (lane == 0) s.warp_fill[warp] = fill;
      __syncthreads();
      bool overflow = false;
      for (int w = 0; w < kWarps; ++w)
        n_mine += s.warp_fill[w], overflow |= s.warp_fill[w] > slice_cap;
      // An overflowing slice lost entries: the cluster's total then exceeds
      // the pool and every CTA takes the fallback below.
      if (overflow) n_mine = pool_cap + 1;
      if (rank == lead && !overflow) {  // slice w moves down to its prefix (never up)
        uint32_t dst = s.warp_fill[0];
        for (int w = 1; w < kWarps; ++w) {
          const uint32_t m = s.warp_fill[w], src = w * slice_cap;
          if (m != 0 && dst != src) {
            uint64_t v[kSliceRegs];
#pragma unroll
            for (int j = 0; j < int(sizeof(v) / sizeof(v[0])); ++j) {
              const uint32_t i = threadIdx.x + j * kThreads;
              if (i < m) v[j] = pool[src + i];
            }
            __syncthreads();  // all of the slice read before any of it is overwritten
#pragma unroll
            for (int j = 0; j < int(sizeof(v) / sizeof(v[0])); ++j) {
              const uint32_t i = threadIdx.x + j * kThreads;
              if (i < m) pool[dst + i] = v[j];
            }
            __syncthreads();  // written before the next slice is read
          }
          dst += m;
        }
      }
    } else {
      collect(KeyAtLeast(K), pool, 0, pool_cap, 0, nch);
      __syncthreads();
      n_mine = s.pool_fill;
    }
    ptx::cluster_wait();  // every CTA of the cluster runs: its counts may be written
    if (variant == 1) return;
    if (threadIdx.x < cs) cluster.map_shared_rank(&s, int(threadIdx.x))->counts[rank] = n_mine;
    cluster.sync();                             // counts in
    uint32_t total = 0, base = s.counts[lead];  // the leader's own entries come first
    for (int q = 0; q < cs; ++q) {
      total += s.counts[q];
      base += q < rank && q != lead ? s.counts[q] : 0u;
    }
    // The top k are all captured when at least k keys are >= K (or K took
    // every candidate); they fit when the whole capture fits one pool.
    if (total > pool_cap || (total < k && K > 1)) {  // the same on every CTA of the cluster
      topk_three_pass(p, cs, sort_cap, smem_raw);
      return;
    }
    if (rank != lead) {
      uint64_t* leader_pool = cluster.map_shared_rank(pool, lead);
      if constexpr (kWarpSlices) {
        for (int w = 0; w < kWarps; ++w) {
          const uint32_t m = s.warp_fill[w];
          for (uint32_t i = threadIdx.x; i < m; i += kThreads)
            leader_pool[base + i] = pool[w * slice_cap + i];
          base += m;
        }
      } else {
        for (uint32_t i = threadIdx.x; i < n_mine; i += kThreads) leader_pool[base + i] = pool[i];
      }
    }
    cluster.sync();  // every pair has landed in the leader's pool
    if (rank != lead || variant == 3) return;
    leader_finish(pool, total, total > k, 0, 0, k, std::min(total, k),
                  reinterpret_cast<uint8_t*>(ring), s, p, r, out, variant == 8);
    return;
  } else {
    // ---- pass 1: top 12 bits over the segment ----
    if (threadIdx.x < head) atomicAdd(&s.hist[topk_key(row[s0 + threadIdx.x]) >> 20], 1u);
    if (threadIdx.x < s1 - t0) atomicAdd(&s.hist[topk_key(row[t0 + threadIdx.x]) >> 20], 1u);
    if (variant == 6) {  // the copies alone: a register sum instead of the atomics
      float sum = 0.f;
      stream(0, nch,
             [&](bool valid, int64_t, float4 x) { sum += valid ? x.x + x.y + x.z + x.w : 0.f; });
      if (sum == 12345.f) s.hist[threadIdx.x] = 1;
    } else {
      stream(0, nch, [&](bool valid, int64_t, float4 x) {
        if (!valid) return;
        atomicAdd(&s.hist[topk_key(x.x) >> 20], 1u), atomicAdd(&s.hist[topk_key(x.y) >> 20], 1u);
        atomicAdd(&s.hist[topk_key(x.z) >> 20], 1u), atomicAdd(&s.hist[topk_key(x.w) >> 20], 1u);
      });
    }
    ptx::cluster_wait();  // every CTA's totals are zeroed
    __syncthreads();      // my histogram is complete
    if (pass1_only) {
      if (threadIdx.x == 0 && s.hist[0] == 0xffffffffu) out[0] = 0;  // keeps the pass alive
      return;
    }

    // ---- the first digit: W above it, C in it, over the cluster ----
    // Each CTA adds its non-zero bins into every CTA's totals (remote
    // reductions, nothing waited on), then one barrier.
    for (int b = threadIdx.x; b < kBins1; b += kThreads) {
      const uint32_t v = s.hist[b];
      if (v)
        for (int q = 0; q < cs; ++q) atomicAdd(cluster.map_shared_rank(s.sel.total, q) + b, v);
    }
    cluster.sync();  // every CTA's totals are complete
    // Candidates: everything outside bin 0 (key 0 = -inf/NaN; no finite value
    // has a key below 2^20). With at most k of them, all are taken.
    uint32_t cand_total = 0, cand_local = 0;
    {
      uint32_t all = 0, mine = 0;
      for (int b = threadIdx.x + (threadIdx.x == 0 ? kThreads : 0); b < kBins1; b += kThreads)
        all += s.sel.total[b], mine += s.hist[b];
      block_exclusive_sum(all, s.warp_part, &cand_total);
      block_exclusive_sum(mine, s.warp_part, &cand_local);
    }
    const bool select = cand_total > k;
    // The pool gets every key >= lo_bin << 20: n_pool in all, n_mine from
    // here; need1 of the keys in lo_bin belong to the top k.
    uint32_t lo_bin = 1, n_pool = cand_total, n_mine = cand_local, need1 = 0;
    if (select) {
      find_digit(s.sel.total, kBins1, k, s);
      lo_bin = s.found_bin;
      need1 = s.found_remaining;
      add_count_above(s.hist, kBins1, lo_bin, &s.local_gt);
      __syncthreads();
      n_pool = (k - need1) + s.sel.total[lo_bin];
      n_mine = s.local_gt + s.hist[lo_bin];
    }
    if (threadIdx.x < cs) cluster.map_shared_rank(&s, int(threadIdx.x))->counts[rank] = n_mine;
    cluster.sync();  // counts in; histograms and totals dead (the leader's become its pool)

    if (n_pool > pool_cap) {  // the same on every CTA of the cluster
      drain();
      topk_three_pass(p, cs, sort_cap, smem_raw);
      return;
    }
    if (variant == 7) {  // timing: stop after the digit exchange
      drain();
      return;
    }

    // ---- pass 2: every key at or above the digit to the leader's pool ----
    uint32_t base = 0;  // this CTA's entries start after those of lower ranks
    for (int q = 0; q < rank; ++q) base += s.counts[q];
    collect(KeyAtLeast(lo_bin << 20), cluster.map_shared_rank(pool, 0), base, n_pool, nch, 2 * nch);
    cluster.sync();  // every pair has landed in the leader's pool
    if (rank != 0 || variant == 3) return;
    leader_finish(pool, n_pool, select, lo_bin, 12, need1, select ? k : cand_total,
                  reinterpret_cast<uint8_t*>(ring), s, p, r, out, variant == 8);
  }
}

}  // namespace

Status launch_topk(const TopkParams& p, cudaStream_t stream) {
  if (p.num_rows == 0) return Status::Ok();
  if (p.k <= 0 || p.k % 64 != 0 || p.k > kTopkMaxK)
    return value_error(Errc::invalid_value, "top-k: k", p.k,
                       "must be a positive multiple of 64, at most 8192");
  if (p.algo < 1 || p.algo > 4)
    return value_error(Errc::invalid_value, "top-k: algo", p.algo, "must be 1, 2, 3 or 4");
  int cs = p.cluster;
  if (cs == 0) {
    // Split rows over a cluster while rows are fewer than two per SM, and keep
    // at least 16K logits per CTA.
    cs = 1;
    while (cs < 8 && p.num_rows * cs < 2LL * num_sms() && p.width / (cs * 2) >= 16384) cs *= 2;
  }
  if (cs != 1 && cs != 2 && cs != 4 && cs != 8)
    return value_error(Errc::invalid_value, "top-k: cluster", cs, "must be 1, 2, 4 or 8");
  if (p.num_rows * cs > 0x7fffffffLL)
    return value_error(Errc::invalid_value, "top-k: rows", p.num_rows,
                       "are too many for one launch");
  // algo 2, 3 and 4 are the three instances of the streaming kernel.
  using StreamKernel = void (*)(TopkParams, int, uint32_t, uint32_t, uint32_t);
  const bool streaming = p.algo != 1;
  const StreamKernel stream_kernel = p.algo == 4   ? topk_stream_kernel<true, true>
                                     : p.algo == 3 ? topk_stream_kernel<true, false>
                                                   : topk_stream_kernel<false, false>;
  const size_t smem = streaming ? stream_smem_bytes(p.k) : topk_smem_bytes(p.k);
  // per process and kernel, for the largest k
  static bool attr_set[4] = {false, false, false, false};
  if (!attr_set[p.algo - 1]) {
    const cudaError_t e =
        streaming ? cudaFuncSetAttribute(stream_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         int(stream_smem_bytes(kTopkMaxK)))
                  : cudaFuncSetAttribute(topk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         int(topk_smem_bytes(kTopkMaxK)));
    MLA_TRY(cuda_status(e, "cudaFuncSetAttribute(topk)"));
    attr_set[p.algo - 1] = true;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(p.num_rows * cs), 1u, 1u);
  cfg.blockDim = dim3(kThreads, 1u, 1u);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = unsigned(cs);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  if (streaming) {
    MLA_TRY(cuda_status(cudaLaunchKernelEx(&cfg, stream_kernel, p, cs, sort_capacity(p.k),
                                           pool_capacity(p.k), uint32_t(ring_offset(p.k))),
                        "cudaLaunchKernelEx(topk_stream_kernel)"));
    return launch_status("topk_stream_kernel");
  }
  MLA_TRY(cuda_status(cudaLaunchKernelEx(&cfg, topk_kernel, p, cs, sort_capacity(p.k)),
                      "cudaLaunchKernelEx(topk_kernel)"));
  return launch_status("topk_kernel");
}

}  // namespace mla::cuda::dsa
