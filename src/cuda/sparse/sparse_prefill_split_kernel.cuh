// The "split" variant of the sparse prefill kernel, kept for one A/B round
// against sparse_prefill_kernel.cuh (SparsePrefillKernel::split): the two
// math warpgroups split S of every tile by keys (m64n32 each) and meet twice
// per tile. Same contract (sparse_prefill_params.hpp). Work item = (query token, block of 64
// heads); persistent CTAs (one per SM) take items blockIdx.x, + gridDim.x, ... in order, so the two
// head blocks of a token run at the same time on neighbouring SMs and the second gather hits L2.
// Three warpgroups:
//   producer (warpgroup 2): per item, Q (64 x 576, rows past h_q zero) into
//     its buffer once the previous item's last S has completed, then the
//     token's key rows gathered by index, 64 keys per tile, with 16-byte
//     cp.async into a two-stage ring of SW128 tiles (a rectangular TMA box
//     cannot gather). The ring runs on across items, so the next item's Q and
//     first tiles load while the current item finishes. Each thread's copies
//     are tracked by the barrier they fill (cp.async.mbarrier.arrive.noinc:
//     the producer never blocks on its own copies). Invalid entries are
//     zero-filled (never read), so that 0 * garbage cannot reach P.V.
//   math (warpgroups 0, 1): warpgroup w computes S for keys [32 w, 32 w + 32)
//     of the tile (wgmma m64n32, Q and K from shared memory); the two meet
//     once per tile to share the row maxima (both then use the same running
//     max, so their row sums and outputs need no later correction), write
//     their half of P (bf16) into one shared SW128 block, meet again, and
//     each adds P V[:, 256 w, 256 w + 256) to its half of the output (m64n256,
//     fp32 accumulators, 128 registers per thread). The P.V of tile t and the
//     S of tile t + 1 are issued back to back, so the tensor cores see two
//     products queued; the softmax of a tile runs between them.
//
// Barrier protocol (scripts/models/sparse_prefill_barriers.py models it; g is
// the CTA's running tile count over its items, k its item count):
//   full[s]  (128 arrivals: every producer thread, when its copies land):
//            tile g in stage g % 2; math waits parity (g / 2) & 1.
//   empty[s] (8 arrivals: lane 0 of every math warp once P.V(g) completed):
//            the producer waits parity ((g / 2) & 1) ^ 1 (round 0 passes at once).
//   q_full   (128 arrivals, as full): Q of item k; math waits parity k & 1.
//   q_empty  (8 arrivals: once the last S of item k completed, or at once for
//            an item without keys): the producer waits parity (k & 1) ^ 1
//            before loading Q of item k.
//   named barrier 1 (256 math threads): row maxima of a tile written (and,
//            per item, the row sums); named barrier 2: P of the tile written.
// A warpgroup reaches barrier 1 of tile t + 1 only after its P.V(t)
// completed, so the P block and the row-max slots are never overwritten while
// read; the row-sum slots alternate with the item's parity.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/common/mbarrier.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/sparse/sparse_prefill_params.hpp"

namespace mla::cuda::sparse::split {

struct SplitConfig {
  static constexpr int kRows = 64;  // query rows per CTA (wgmma M)
  static constexpr int kKeys = 64;  // keys per gathered tile
  static constexpr int kDqk = 576, kDv = 512;
  static constexpr int kCol = 64;  // bf16 columns of one 128-byte swizzle row
  static constexpr int kQkBlocks = kDqk / kCol, kVBlocks = kDv / kCol;
  static constexpr int kChunks = kDqk / 8;  // 16-byte pieces of one row
  static constexpr int kQBlockBytes = kRows * 128, kKBlockBytes = kKeys * 128;
  static constexpr int kSmemQ = kQBlockBytes * kQkBlocks;
  static constexpr int kSmemK = kKBlockBytes * kQkBlocks;
  static constexpr int kStages = 2;  // gathered key tiles in flight
  static constexpr int kSmemP = kRows * kKeys * 2;
  // Two math warpgroups: each computes S for half of a tile's keys and owns
  // half of the output columns; a producer warpgroup gathers.
  static constexpr int kMathWgs = 2;
  static constexpr int kMathThreads = kMathWgs * 128;
  static constexpr int kThreads = kMathThreads + 128;
  static constexpr int kKeysPerWg = kKeys / kMathWgs;  // S columns of one math warpgroup
  static constexpr int kVColsPerWg = kDv / kMathWgs;   // output columns of one math warpgroup
  // Row maxima (per tile) and row sums (per item, two sets by item parity) exchanged.
  static constexpr int kSmemRed = 3 * kMathWgs * kRows * 4;
  static constexpr int kBarriers = 2 * kStages + 2;  // full, empty per stage; q_full, q_empty
  static constexpr int kSmemBytes =
      1024 /* alignment slack */ + kSmemQ + kStages * kSmemK + kSmemP + kSmemRed + 8 * kBarriers;
  static constexpr int kProducerRegs = 72, kMathRegs = 216;
  // Producer: 8 threads per key row (each 9 pieces 128 B apart), 16 rows per pass.
  static constexpr int kThreadsPerKey = 8, kKeysPerPass = 128 / kThreadsPerKey;

  static_assert(kRows == 64, "wgmma M is 64: one warpgroup's accumulator rows");
  static_assert(kDqk % kCol == 0 && kDv % kCol == 0, "Q, K and V are whole SW128 blocks");
  static_assert(kKeysPerWg % 8 == 0 && kKeysPerWg == 32, "S of one warpgroup is one m64n32 tile");
  static_assert(kVColsPerWg == 256, "P.V of one warpgroup is one m64n256 tile");
  static_assert(kKeys * 2 == 128, "P (64 rows x 64 keys bf16) is exactly one SW128 block");
  static_assert(kThreadsPerKey * 9 == kChunks, "a producer thread copies 9 pieces of its key row");
  static_assert(kKeys % kKeysPerPass == 0, "whole producer passes per tile");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per CTA on Hopper is 227 KB");
  static_assert(kProducerRegs * 128 + kMathRegs * kMathThreads <= 65536,
                "setmaxnreg budgets must fit the register file");
};

// Byte offset of the 16-byte piece `chunk` (0..71) of row `r` in a tile of
// SW128 blocks of `block_bytes` (block = 64 columns, piece j of row r at j ^ (r % 8)).
__device__ __forceinline__ uint32_t sw128_offset(int r, int chunk, int block_bytes) {
  return uint32_t((chunk >> 3) * block_bytes + r * 128 + (((chunk & 7) ^ (r & 7)) << 4));
}

// One work item: a token's block of up to 64 heads and its list.
struct Item {
  int token, h0, rows, n, tiles;
  const int32_t* list;
};
__device__ __forceinline__ Item make_item(const SparsePrefillParams& p, int item) {
  using C = SplitConfig;
  const int head_blocks = (p.h_q + C::kRows - 1) / C::kRows;
  Item it;
  it.token = item / head_blocks;
  it.h0 = (item % head_blocks) * C::kRows;
  it.rows = min(C::kRows, p.h_q - it.h0);
  it.n = p.topk_length == nullptr ? p.topk : min(max(p.topk_length[it.token], 0), p.topk);
  it.tiles = (it.n + C::kKeys - 1) / C::kKeys;
  it.list = p.indices + int64_t(it.token) * p.idx_ss;
  return it;
}

// Validity of the 64 entries of tile t as a bit mask (bit k: entry 64 t + k
// is used and names a row of kv). Every lane of the warp gets the mask.
__device__ __forceinline__ uint64_t tile_valid_mask(const SparsePrefillParams& p, const Item& it,
                                                    int t, int lane) {
  const int j0 = t * 64 + lane, j1 = j0 + 32;
  const int r0 = j0 < it.n ? it.list[j0] : -1, r1 = j1 < it.n ? it.list[j1] : -1;
  const uint32_t lo = __ballot_sync(0xffffffffu, r0 >= 0 && r0 < p.s_kv);
  const uint32_t hi = __ballot_sync(0xffffffffu, r1 >= 0 && r1 < p.s_kv);
  return uint64_t(lo) | (uint64_t(hi) << 32);
}

// S[64 x 32] = Q[64 x 576] K[key0 .. key0 + 32)^T, both K-major SW128 tiles.
__device__ __forceinline__ void issue_s(float (&s)[4][4], uint32_t q_addr, uint32_t k_addr) {
  using C = SplitConfig;
#pragma unroll
  for (int blk = 0; blk < C::kQkBlocks; ++blk)
#pragma unroll
    for (int sub = 0; sub < 4; ++sub)
      wgmma::m64n32k16_ss(s, wgmma::desc_sw128(q_addr + blk * C::kQBlockBytes + sub * 32, 16, 1024),
                          wgmma::desc_sw128(k_addr + blk * C::kKBlockBytes + sub * 32, 16, 1024),
                          blk > 0 || sub > 0);
}

// Producer: Q of item `it` (one thread of 128: 36 pieces), tracked by q_full.
__device__ __forceinline__ void load_q(const SparsePrefillParams& p, const Item& it,
                                       unsigned char* sQ, uint64_t* q_full, int ptid) {
  using C = SplitConfig;
  const __nv_bfloat16* const q =
      static_cast<const __nv_bfloat16*>(p.q) + int64_t(it.token) * p.q_ss + int64_t(it.h0) * p.q_sh;
  if (p.timing_variant == 1) {  // diagnosis: no copies
    ptx::mbar_arrive(q_full);
    return;
  }
  for (int i = ptid; i < C::kRows * C::kChunks; i += 128) {
    const int r = i / C::kChunks, chunk = i % C::kChunks;
    const bool valid = r < it.rows;
    ptx::cp_async_16(sQ + sw128_offset(r, chunk, C::kQBlockBytes),
                     q + (valid ? int64_t(r) * p.q_sh + chunk * 8 : 0), valid);
  }
  ptx::cp_async_mbar_arrive_noinc(q_full);
}

// Producer: tile t of item `it` into `tile` (8 threads per key row, 9 pieces
// each, 16 rows per pass), tracked by `full`, once `empty` allows.
__device__ __forceinline__ void gather_tile(const SparsePrefillParams& p, const Item& it, int t,
                                            unsigned char* tile, uint64_t* full, uint64_t* empty,
                                            uint32_t empty_parity, int ptid, uint64_t policy) {
  using C = SplitConfig;
  constexpr int kPasses = C::kKeys / C::kKeysPerPass;
  const int sub = ptid % C::kThreadsPerKey, kgrp = ptid / C::kThreadsPerKey;
  int row[kPasses];
#pragma unroll
  for (int pass = 0; pass < kPasses; ++pass) {  // the index loads overlap the wait
    const int j = t * C::kKeys + kgrp + pass * C::kKeysPerPass;
    row[pass] = j < it.n ? it.list[j] : -1;
  }
  ptx::mbar_wait(empty, empty_parity);
  if (p.timing_variant == 1) {  // diagnosis: no copies
    ptx::mbar_arrive(full);
    return;
  }
  const __nv_bfloat16* const kv = static_cast<const __nv_bfloat16*>(p.kv);
#pragma unroll
  for (int pass = 0; pass < kPasses; ++pass) {
    const int key = kgrp + pass * C::kKeysPerPass;
    const bool valid = row[pass] >= 0 && row[pass] < p.s_kv;
    const __nv_bfloat16* const src = kv + (valid ? int64_t(row[pass]) * p.kv_row_stride : 0);
#pragma unroll 3
    for (int blk = 0; blk < C::kQkBlocks; ++blk) {
      const int chunk = blk * 8 + sub;
      ptx::cp_async_16_l2(tile + sw128_offset(key, chunk, C::kKBlockBytes), src + chunk * 8, valid,
                          policy);
    }
  }
  ptx::cp_async_mbar_arrive_noinc(full);
}

__global__ void __launch_bounds__(SplitConfig::kThreads, 1)
    sparse_prefill_split_kernel(const __grid_constant__ SparsePrefillParams p, int n_items) {
  using C = SplitConfig;
  using namespace ptx;
  extern __shared__ unsigned char smem_raw[];
  // Swizzle atoms must sit on 1024-byte boundaries (the hardware swizzles by address).
  unsigned char* const sQ = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  unsigned char* const sK = sQ + C::kSmemQ;
  unsigned char* const sP = sK + C::kStages * C::kSmemK;
  float* const red_max = reinterpret_cast<float*>(sP + C::kSmemP);  // [wg][row]
  float* const red_sum = red_max + C::kMathWgs * C::kRows;          // [item & 1][wg][row]
  uint64_t* const full = reinterpret_cast<uint64_t*>(red_sum + 2 * C::kMathWgs * C::kRows);
  uint64_t* const empty = full + C::kStages;
  uint64_t* const q_full = empty + C::kStages;
  uint64_t* const q_empty = q_full + 1;

  const int tid = threadIdx.x, wg = tid / 128;
  if (tid == 0) {
    for (int s = 0; s < C::kStages; ++s) {
      mbar_init(&full[s], 128);
      mbar_init(&empty[s], C::kMathThreads / 32);
    }
    mbar_init(q_full, 128);
    mbar_init(q_empty, C::kMathThreads / 32);
    mbar_fence_init();
  }
  __syncthreads();

  if (wg == C::kMathWgs) {  // ---- producer ----
    wgmma::setmaxnreg_dec<C::kProducerRegs>();
    const int ptid = tid - C::kMathThreads;
    const uint64_t policy = l2_policy_evict_last();  // keys are reused by other items
    int g = 0, k = 0;
    for (int item = blockIdx.x; item < n_items; item += gridDim.x, ++k) {
      const Item it = split::make_item(p, item);
      mbar_wait(q_empty, (k & 1) ^ 1);
      split::load_q(p, it, sQ, q_full, ptid);
      for (int t = 0; t < it.tiles; ++t, ++g) {
        const int s = g % C::kStages;
        split::gather_tile(p, it, t, sK + s * C::kSmemK, &full[s], &empty[s],
                           ((g / C::kStages) & 1) ^ 1, ptid, policy);
      }
    }
    cp_async_wait<0>();
    return;
  }

  // ---- math warpgroups ----
  wgmma::setmaxnreg_inc<C::kMathRegs>();
  const int w = wg, lane = tid % 32, warp = (tid % 128) / 32;
  const int g4 = lane / 4, c = lane % 4;
  const int r0 = warp * 16 + g4, r1 = r0 + 8;  // the two accumulator rows of this thread
  const float scale_log2 = p.softmax_scale * 1.4426950408889634f;
  const uint32_t q_addr = smem_addr(sQ), k_addr0 = smem_addr(sK), p_addr = smem_addr(sP);
  auto release = [&](uint64_t* bar) {  // after this warp's wgmma reading the buffer completed
    __syncwarp();
    if (lane == 0) mbar_arrive(bar);
  };

  int g = 0, k = 0;
  for (int item = blockIdx.x; item < n_items; item += gridDim.x, ++k) {
    const Item it = split::make_item(p, item);
    float o[C::kVColsPerWg / 8][4];
#pragma unroll
    for (int i = 0; i < C::kVColsPerWg / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float s[C::kKeysPerWg / 8][4];
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;  // log2 domain, thread-partial sums

    mbar_wait(q_full, k & 1);
    uint64_t valid = 0;
    if (it.tiles > 0) {
      valid = split::tile_valid_mask(p, it, 0, lane);
      mbar_wait(&full[g % C::kStages], (g / C::kStages) & 1);
      wgmma::fence_proxy_async();
      wgmma::fence();
      issue_s(s, q_addr, k_addr0 + (g % C::kStages) * C::kSmemK + w * C::kKeysPerWg * 128);
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::fence_regs(s);
    }
    if (it.tiles <= 1) release(q_empty);  // no S of this item left to issue

    for (int t = 0; t < it.tiles; ++t, ++g) {
      const int stage = g % C::kStages;
      // Scale into the log2 domain, mask, row maxima of this warpgroup's 32 keys.
      float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
      for (int i = 0; i < C::kKeysPerWg / 8; ++i)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = w * C::kKeysPerWg + i * 8 + 2 * c + e;
          const bool ok = (valid >> key) & 1;
          s[i][e] = ok ? s[i][e] * scale_log2 : -INFINITY;
          s[i][2 + e] = ok ? s[i][2 + e] * scale_log2 : -INFINITY;
          mx0 = fmaxf(mx0, s[i][e]), mx1 = fmaxf(mx1, s[i][2 + e]);
        }
#pragma unroll
      for (int off = 1; off < 4; off <<= 1) {
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
      }
      if (c == 0) red_max[w * C::kRows + r0] = mx0, red_max[w * C::kRows + r1] = mx1;
      named_barrier_sync(1, C::kMathThreads);
      const float* const other = red_max + (1 - w) * C::kRows;
      const float mn0 = fmaxf(m0, fmaxf(mx0, other[r0])), mn1 = fmaxf(m1, fmaxf(mx1, other[r1]));
      // A row with no valid key so far keeps max -inf: exponentiate against 0 (P = 0).
      const float ms0 = mn0 == -INFINITY ? 0.f : mn0, ms1 = mn1 == -INFINITY ? 0.f : mn1;
      const float a0 = fast_exp2(m0 - ms0), a1 = fast_exp2(m1 - ms1);
      m0 = mn0, m1 = mn1;
      l0 *= a0, l1 *= a1;
      // Rescale O only where a row maximum moved (rare after the first tiles).
      if (a0 != 1.f || a1 != 1.f) {
#pragma unroll
        for (int i = 0; i < C::kVColsPerWg / 8; ++i)
          o[i][0] *= a0, o[i][1] *= a0, o[i][2] *= a1, o[i][3] *= a1;
      }
      // P (bf16) into the shared SW128 block: row r, key k at r*128 + ((k/8) ^ (r%8))*16 + (k%8)*2.
#pragma unroll
      for (int i = 0; i < C::kKeysPerWg / 8; ++i) {
        const float p00 = fast_exp2(s[i][0] - ms0), p01 = fast_exp2(s[i][1] - ms0);
        const float p10 = fast_exp2(s[i][2] - ms1), p11 = fast_exp2(s[i][3] - ms1);
        l0 += p00 + p01, l1 += p10 + p11;
        const int key = w * C::kKeysPerWg + i * 8 + 2 * c;
        const int piece = key >> 3, within = (key & 7) * 2;
        *reinterpret_cast<uint32_t*>(sP + r0 * 128 + ((piece ^ (r0 & 7)) << 4) + within) =
            pack_bf16x2(p00, p01);
        *reinterpret_cast<uint32_t*>(sP + r1 * 128 + ((piece ^ (r1 & 7)) << 4) + within) =
            pack_bf16x2(p10, p11);
      }
      wgmma::fence_proxy_async();
      named_barrier_sync(2, C::kMathThreads);
      // O[:, 256 w ..) += P V: V is the K tile read MN-major (keys 128 B apart).
      const uint32_t v_addr =
          k_addr0 + stage * C::kSmemK + w * (C::kVColsPerWg / 64) * C::kKBlockBytes;
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < C::kKeys / 16; ++kk)
        wgmma::m64n256k16_ss_tb(o, wgmma::desc_sw128(p_addr + kk * 32, 16, 1024),
                                wgmma::desc_sw128(v_addr + kk * 16 * 128, C::kKBlockBytes, 1024),
                                true);
      wgmma::commit();
      if (t + 1 < it.tiles) {
        valid = split::tile_valid_mask(p, it, t + 1, lane);
        const int next = (g + 1) % C::kStages;
        mbar_wait(&full[next], ((g + 1) / C::kStages) & 1);
        wgmma::fence_proxy_async();
        wgmma::fence();  // s was rewritten by the softmax
        issue_s(s, q_addr, k_addr0 + next * C::kSmemK + w * C::kKeysPerWg * 128);
        wgmma::commit();
        wgmma::wait<1>();  // P.V(t) done: release its stage while S(t + 1) runs
        wgmma::fence_regs(o);
        release(&empty[stage]);
        wgmma::wait<0>();
        wgmma::fence_regs(s);
        if (t + 2 == it.tiles) release(q_empty);  // that was the item's last S
      } else {
        wgmma::wait<0>();
        wgmma::fence_regs(o);
        release(&empty[stage]);
      }
    }

    // Row sums: the quad's partials, then the other warpgroup's (same running max).
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
      l0 += __shfl_xor_sync(0xffffffffu, l0, off);
      l1 += __shfl_xor_sync(0xffffffffu, l1, off);
    }
    float* const sums = red_sum + (k & 1) * C::kMathWgs * C::kRows;
    if (c == 0) sums[w * C::kRows + r0] = l0, sums[w * C::kRows + r1] = l1;
    named_barrier_sync(1, C::kMathThreads);
    l0 += sums[(1 - w) * C::kRows + r0], l1 += sums[(1 - w) * C::kRows + r1];
    const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
    __nv_bfloat16* const out = static_cast<__nv_bfloat16*>(p.out) + int64_t(it.token) * p.out_ss +
                               int64_t(it.h0) * p.out_sh;
#pragma unroll
    for (int i = 0; i < C::kVColsPerWg / 8; ++i) {
      const int col = w * C::kVColsPerWg + i * 8 + 2 * c;
      if (r0 < it.rows)
        *reinterpret_cast<uint32_t*>(out + int64_t(r0) * p.out_sh + col) =
            pack_bf16x2(o[i][0] * inv0, o[i][1] * inv0);
      if (r1 < it.rows)
        *reinterpret_cast<uint32_t*>(out + int64_t(r1) * p.out_sh + col) =
            pack_bf16x2(o[i][2] * inv1, o[i][3] * inv1);
    }
    if (w == 0 && c == 0) {
      constexpr float kLn2 = 0.6931471805599453f;
      float* const lse = p.lse + int64_t(it.token) * p.lse_ss + int64_t(it.h0) * p.lse_sh;
      if (r0 < it.rows)
        lse[int64_t(r0) * p.lse_sh] = l0 > 0.f ? (m0 + log2f(l0)) * kLn2 : -INFINITY;
      if (r1 < it.rows)
        lse[int64_t(r1) * p.lse_sh] = l1 > 0.f ? (m1 + log2f(l1)) * kLn2 : -INFINITY;
    }
  }
}

}  // namespace mla::cuda::sparse::split
