// Token top-k by radix select (DESIGN.md section 1: S_t = top-k(I[t, :])).
//
// A row is handled by a cluster of CS CTAs (CS = 1 when rows fill the GPU; a
// long row among few rows is split over 2-8 CTAs). Each CTA owns a contiguous
// segment of the row. Logits are mapped to order-preserving 32-bit keys and the
// k-th largest key T is found in three digit rounds (12, 10, 10 bits). The row
// is read twice (16-byte loads, several in flight per thread):
//   pass 1   histogram of the top 12 bits over the segment; the cluster's
//            histograms are summed through distributed shared memory and the
//            digit B1 holding the k-th largest is found;
//   pass 2   every element above B1 is a winner: its (key, position) goes
//            straight to the cluster leader's sort buffer; the elements of B1
//            are gathered (key, position) into shared memory;
//   rounds 2, 3 on the gathered candidates only, then their winners (> T) and
//            their ties (== T) join the sort buffer.
// The leader sorts the buffer by descending key, then ascending position
// (bitonic, in shared memory), and writes the first k: the order of
// mla/topk.hpp, identical on every run whatever the order entries arrived in.
// Ties at T are all added and the sort keeps the lowest positions, so the
// buffer holds k + (ties not taken) entries; it is sized 2 * pow2(k).
// Fallbacks (slower, same result): when a CTA's candidates overflow its
// buffer, later rounds re-read the segment; when they overflow or the ties do
// not fit the sort buffer, an ordered pass over the row (a block-wide scan:
// index = #greater before p + min(#equal before p, still needed)) places
// exactly the k chosen. -inf and NaN map to key 0 and are never candidates;
// when a row has at most k candidates, T = 0 and all of them are taken.
#include <cooperative_groups.h>

#include <algorithm>

#include "cuda/dsa/dsa_device.cuh"
#include "cuda/dsa/topk_launch.hpp"

namespace cg = cooperative_groups;

namespace mla::cuda::dsa {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kBins1 = 4096;  // round 1: bits [31:20]
constexpr int kBins = 1024;   // rounds 2, 3: bits [19:10], [9:0]
constexpr int kCandCap = 5120;  // keeps 2 CTAs per SM at k <= 2048
constexpr int kUnroll = 4;
constexpr int kTopkMaxK = 8192;
static_assert(kBins1 % kThreads == 0 && kBins % kThreads == 0, "bins split evenly over threads");

// Followed in dynamic shared memory by the sort buffer: (key << 32 | ~position)
// pairs, 2 * pow2(k) of them (only the leader's is used).
struct TopkSmem {
  uint32_t hist[kBins1];  // this CTA's histogram (read by the cluster)
  struct {
    uint32_t total[kBins1];  // the cluster's sum
    uint32_t cand_key[kCandCap];
    int32_t cand_pos[kCandCap];
  } sel;
  uint32_t scan_gt[kUnroll * kWarps];
  uint32_t scan_eq[kUnroll * kWarps];
  uint32_t warp_part[kWarps];
  uint32_t num_cand;
  uint32_t found_bin, found_remaining;
  uint32_t local_gt, local_eq;  // this CTA's elements > T and == T (read by the cluster)
  uint32_t local_gt1;           // of those, above the first digit B1 (read by the cluster)
  uint32_t emitted[3];          // pass-2 winners, candidates > T, == T placed so far
};

uint32_t sort_capacity(int k) {
  uint32_t n2 = 1;
  while (n2 < uint32_t(k)) n2 <<= 1;
  return 2 * n2;
}
constexpr size_t kSortOffset = (sizeof(TopkSmem) + 15) & ~size_t(15);  // 8-byte pairs: aligned
size_t topk_smem_bytes(int k) { return kSortOffset + sizeof(uint64_t) * sort_capacity(k); }

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

// Sum the cluster's histograms into s.total, find the digit, and add this CTA's
// count of elements in bins above it to s.local_gt.
__device__ void reduce_and_find(cg::cluster_group& cluster, int cs, int nbins, uint32_t need,
                                TopkSmem& s) {
  cluster.sync();  // every CTA's histogram is complete
  for (int b = threadIdx.x; b < nbins; b += kThreads) {
    uint32_t sum = 0;
    for (int r = 0; r < cs; ++r) sum += cluster.map_shared_rank(s.hist, r)[b];
    s.sel.total[b] = sum;
  }
  cluster.sync();  // nobody reads my histogram any more
  find_digit(s.sel.total, nbins, need, s);
  const uint32_t B = s.found_bin;
  uint32_t gt = 0;
  for (int b = threadIdx.x; b < nbins; b += kThreads) gt += uint32_t(b) > B ? s.hist[b] : 0u;
  if (gt) atomicAdd(&s.local_gt, gt);
  __syncthreads();
}

__global__ void __launch_bounds__(kThreads, 2) topk_kernel(TopkParams p, int cs, uint32_t sort_cap) {
  extern __shared__ __align__(16) uint8_t smem_raw[];
  TopkSmem& s = *reinterpret_cast<TopkSmem*>(smem_raw);
  uint64_t* sorted = reinterpret_cast<uint64_t*>(smem_raw + kSortOffset);
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = int(cluster.block_rank());
  const int64_t r = blockIdx.x / cs;
  const float* row = p.logits + r * p.logits_stride;
  int32_t* out = p.out + r * p.out_stride;
  const int64_t n = min64(p.width, max64(0, p.lengths ? p.lengths[r] : p.width));  // device lengths are not host-checked
  const int64_t seg = (n + cs - 1) / cs;
  const int64_t s0 = min64(n, rank * seg), s1 = min64(n, (rank + 1) * seg);
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
    for_each_logit(row, s0, s1, [&](int64_t, float v) { atomicAdd(&s.hist[topk_key(v) >> 20], 1u); });
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
      for_each_candidate(shift + 10, [&](uint32_t key) { atomicAdd(&s.hist[(key >> shift) & (kBins - 1)], 1u); });
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
          leader_sorted[gt1_total + gt2_before + atomicAdd(&s.emitted[1], 1u)] = sort_pair(key, s.sel.cand_pos[c]);
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
          if (lane == 0) s.scan_gt[u * kWarps + warp] = __popc(gm[u]), s.scan_eq[u * kWarps + warp] = __popc(em[u]);
        }
        __syncthreads();
        if (warp == 0) {  // exclusive scan of the kUnroll * kWarps = 64 entries, 2 per lane
          static_assert(kUnroll * kWarps == 64, "one warp scans two entries per lane");
          const uint32_t a0 = s.scan_gt[2 * lane], a1 = s.scan_gt[2 * lane + 1];
          const uint32_t e0 = s.scan_eq[2 * lane], e1 = s.scan_eq[2 * lane + 1];
          uint32_t ia = a0 + a1, ie = e0 + e1;
#pragma unroll
          for (int o = 1; o < 32; o <<= 1) {
            const uint32_t na = __shfl_up_sync(0xffffffffu, ia, o), ne = __shfl_up_sync(0xffffffffu, ie, o);
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
          const uint32_t g_before = gt_before + s.scan_gt[u * kWarps + warp] + __popc(gm[u] & lt_mask);
          const uint32_t e_before = eq_before + s.scan_eq[u * kWarps + warp] + __popc(em[u] & lt_mask);
          if (eq[u] && e_before >= need) continue;
          leader_sorted[g_before + min(e_before, need)] = sort_pair(key[u], c0 + u * kThreads + threadIdx.x);
        }
        gt_before += s.warp_part[0];
        eq_before += s.warp_part[1];
        __syncthreads();  // scan arrays are rewritten by the next chunk
      }
    }
  }
  cluster.sync();  // every pair has landed at the leader
  if (rank != 0) return;

  // ---- leader: sort descending (key, then lower position), write the first k ----
  uint32_t n2 = 1;
  while (n2 < n_sort) n2 <<= 1;
  for (uint32_t i = n_sort + threadIdx.x; i < n2; i += kThreads) sorted[i] = 0;  // sorts last
  __syncthreads();
  for (uint32_t size = 2; size <= n2; size <<= 1) {
    for (uint32_t stride = size / 2; stride > 0; stride >>= 1) {
      for (uint32_t i = threadIdx.x; i < n2 / 2; i += kThreads) {
        const uint32_t lo = 2 * i - (i & (stride - 1)), hi = lo + stride;
        const bool desc = (lo & size) == 0;
        const uint64_t a = sorted[lo], b = sorted[hi];
        if ((a < b) == desc) sorted[lo] = b, sorted[hi] = a;
      }
      __syncthreads();
    }
  }
  for (uint32_t i = threadIdx.x; i < k; i += kThreads)
    out[i] = i < chosen ? translate(p, r, int64_t(~uint32_t(sorted[i]))) : -1;
}

}  // namespace

Status launch_topk(const TopkParams& p, cudaStream_t stream) {
  if (p.num_rows == 0) return Status::Ok();
  if (p.k <= 0 || p.k % 64 != 0 || p.k > kTopkMaxK)
    return value_error(Errc::invalid_value, "top-k: k", p.k, "must be a positive multiple of 64, at most 8192");
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
    return value_error(Errc::invalid_value, "top-k: rows", p.num_rows, "are too many for one launch");
  const size_t smem = topk_smem_bytes(p.k);
  static bool attr_set = false;  // a per-process attribute, set once for the largest k
  if (!attr_set) {
    MLA_TRY(cuda_status(cudaFuncSetAttribute(topk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             int(topk_smem_bytes(kTopkMaxK))),
                        "cudaFuncSetAttribute(topk_kernel)"));
    attr_set = true;
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
  MLA_TRY(cuda_status(cudaLaunchKernelEx(&cfg, topk_kernel, p, cs, sort_capacity(p.k)), "cudaLaunchKernelEx(topk_kernel)"));
  return launch_status("topk_kernel");
}

}  // namespace mla::cuda::dsa
