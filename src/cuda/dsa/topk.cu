// Token top-k by radix select (DESIGN.md section 1: S_t = top-k(I[t, :])).
//
// A row is handled by a cluster of CS CTAs (CS = 1 when rows fill the GPU; a
// long row among few rows is split over 2-8 CTAs). Each CTA owns a contiguous
// segment of the row. Logits are mapped to order-preserving 32-bit keys and the
// k-th largest key T is found in three digit rounds (12, 10, 10 bits):
//   round 1  histogram of the top 12 bits over the segment (global read);
//            the cluster's histograms are summed through distributed shared
//            memory; the digit holding the k-th largest is found;
//   gather   elements of that digit are copied (key, position) to shared
//            memory (global read); past the buffer, the CTA falls back to
//            re-reading its segment in later rounds (slower, same result);
//   round 2, 3 on the candidates.
// -inf and NaN map to key 0 and are never candidates; when a row has at most k
// candidates, T = 0 and all of them are taken. Then every element with key > T
// is taken, and of the keys == T the lowest positions until k (deterministic
// ties). The output pass (global read) walks the segment in position order
// with a block-wide ordered scan (index = #greater before p + min(#equal
// before p, still needed)) and drops each (key, position) at that index into
// the cluster leader's shared memory, which sorts the k pairs by descending
// key, then ascending position (bitonic), and writes them: the order of
// mla/topk.hpp, identical on every run.
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
constexpr int kCandCap = 6144;
constexpr int kUnroll = 4;
constexpr int kTopkMaxK = 8192;
static_assert(kBins1 % kThreads == 0 && kBins % kThreads == 0, "bins split evenly over threads");

struct TopkSmem {
  uint32_t hist[kBins1];  // this CTA's histogram (read by the cluster)
  union {
    struct {
      uint32_t total[kBins1];  // the cluster's sum
      uint32_t cand_key[kCandCap];
      int32_t cand_pos[kCandCap];
    } sel;
    uint64_t sorted[kTopkMaxK];  // leader: (key << 32 | ~position) of the chosen, then sorted
  };
  uint32_t scan_gt[kUnroll * kWarps];
  uint32_t scan_eq[kUnroll * kWarps];
  uint32_t warp_part[kWarps];
  uint32_t num_cand;
  uint32_t found_bin, found_remaining;
  uint32_t local_gt, local_eq;  // this CTA's elements > T and == T (read by the cluster)
};
static_assert(sizeof(TopkSmem::sel) >= sizeof(uint64_t) * kTopkMaxK, "the sort buffer reuses the selection arrays");

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

__global__ void __launch_bounds__(kThreads) topk_kernel(TopkParams p, int cs) {
  extern __shared__ __align__(16) uint8_t smem_raw[];
  TopkSmem& s = *reinterpret_cast<TopkSmem*>(smem_raw);
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = int(cluster.block_rank());
  const int64_t r = blockIdx.x / cs;
  const float* row = p.logits + r * p.logits_stride;
  int32_t* out = p.out + r * p.out_stride;
  const int64_t n = max64(0, p.lengths ? p.lengths[r] : p.width);
  const int64_t seg = (n + cs - 1) / cs;
  const int64_t s0 = min64(n, rank * seg), s1 = min64(n, (rank + 1) * seg);
  const uint32_t k = uint32_t(p.k);

  // ---- round 1: top 12 bits over the segment ----
  for (int b = threadIdx.x; b < kBins1; b += kThreads) s.hist[b] = 0;
  if (threadIdx.x == 0) s.num_cand = 0, s.local_gt = 0, s.local_eq = 0;
  __syncthreads();
  for (int64_t i = s0 + threadIdx.x; i < s1; i += kThreads * kUnroll) {
    float v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t j = i + u * kThreads;
      v[u] = j < s1 ? row[j] : 0.f;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (i + u * kThreads < s1) atomicAdd(&s.hist[topk_key(v[u]) >> 20], 1u);
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
  if (cand_total <= k && threadIdx.x == 0) s.local_gt = cand_local;  // T = 0: all are "greater"
  uint32_t T = 0, need = 0;
  if (cand_total > k) {
    reduce_and_find(cluster, cs, kBins1, k, s);
    uint32_t prefix = s.found_bin;  // the digits of T found so far
    need = s.found_remaining;

    // ---- gather the candidates of that digit ----
    for (int64_t i = s0 + threadIdx.x; i < s1; i += kThreads) {
      const uint32_t key = topk_key(row[i]);
      if ((key >> 20) == prefix) {
        const uint32_t at = atomicAdd(&s.num_cand, 1u);
        if (at < kCandCap) s.sel.cand_key[at] = key, s.sel.cand_pos[at] = int32_t(i);
      }
    }
    __syncthreads();
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
    T = prefix;  // the k-th largest key; `need` of the keys == T are taken
  }
  const uint32_t chosen = cand_total > k ? k : cand_total;

  // ---- exchange counts: what the lower-ranked segments take ----
  cluster.sync();
  uint32_t gt_before = 0, eq_before = 0;
  for (int q = 0; q < rank; ++q) {
    const TopkSmem* o = cluster.map_shared_rank(&s, q);
    gt_before += o->local_gt;
    eq_before += o->local_eq;
  }
  uint64_t* leader_sorted = cluster.map_shared_rank(s.sorted, 0);
  cluster.sync();  // remote reads done; the leader's selection arrays are free

  // ---- ordered pass: each chosen (key, position) to its index at the leader ----
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
      eq[u] = key[u] == T && T != 0;
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
      const uint32_t pos = uint32_t(c0 + u * kThreads + threadIdx.x);
      leader_sorted[g_before + min(e_before, need)] = (uint64_t(key[u]) << 32) | uint64_t(~pos);
    }
    gt_before += s.warp_part[0];
    eq_before += s.warp_part[1];
    __syncthreads();  // scan arrays are rewritten by the next chunk
  }
  cluster.sync();  // every chosen pair has landed at the leader
  if (rank != 0) return;

  // ---- leader: sort descending (key, then lower position), write ----
  uint32_t n2 = 1;
  while (n2 < chosen) n2 <<= 1;
  for (uint32_t i = chosen + threadIdx.x; i < n2; i += kThreads) s.sorted[i] = 0;  // sorts last
  __syncthreads();
  for (uint32_t size = 2; size <= n2; size <<= 1) {
    for (uint32_t stride = size / 2; stride > 0; stride >>= 1) {
      for (uint32_t i = threadIdx.x; i < n2 / 2; i += kThreads) {
        const uint32_t lo = 2 * i - (i & (stride - 1)), hi = lo + stride;
        const bool desc = (lo & size) == 0;
        const uint64_t a = s.sorted[lo], b = s.sorted[hi];
        if ((a < b) == desc) s.sorted[lo] = b, s.sorted[hi] = a;
      }
      __syncthreads();
    }
  }
  for (uint32_t i = threadIdx.x; i < k; i += kThreads)
    out[i] = i < chosen ? translate(p, r, int64_t(~uint32_t(s.sorted[i]))) : -1;
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
  const size_t smem = sizeof(TopkSmem);
  static bool attr_set = false;  // a per-process attribute, set once
  if (!attr_set) {
    MLA_TRY(cuda_status(cudaFuncSetAttribute(topk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
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
  MLA_TRY(cuda_status(cudaLaunchKernelEx(&cfg, topk_kernel, p, cs), "cudaLaunchKernelEx(topk_kernel)"));
  return launch_status("topk_kernel");
}

}  // namespace mla::cuda::dsa
