// Sparse prefill attention on Hopper (sm_90a): the contract of
// sparse_prefill_params.hpp. Work item = (query token, block of 64 heads);
// persistent CTAs (one per SM) take items blockIdx.x, + gridDim.x, ... in
// order, so the two head blocks of a token run at the same time on
// neighbouring SMs and the second gather hits L2. Three warpgroups:
//
// producer (warpgroup 2): per item, Q (64 x 576, rows past h_q zero) into its
//   buffer once the previous item's last S products have completed, then the
//   token's key rows gathered by index with 16-byte cp.async into two SW128
//   tile buffers (a rectangular TMA box cannot gather): tile 2i into buffer 0,
//   2i + 1 into buffer 1, each buffer in two halves (L: blocks 0..3, R: blocks
//   4..8) with their own ready/free barriers, refilled in the order they free
//   up. The buffers run on across items, so the next item's Q and first tiles
//   load while the current one finishes. Each thread's copies are tracked by
//   the barrier they fill (cp.async.mbarrier.arrive.noinc: the producer never
//   blocks on its own copies). Invalid entries are zero-filled (never read),
//   so that 0 * garbage cannot reach P.V. fp8_ds_mla keys (kFp8) are loaded
//   into registers instead, dequantised (e4m3 x power-of-two scale: exact in
//   bf16) and stored with generic stores, then fence.proxy.async and a plain
//   arrival on the barrier they fill; in that instantiation the K buffers are
//   written by generic stores only (still never by two proxies).
//
// math (warpgroups 0, 1): warpgroup 0 owns output columns 0..255 (O_L) and
//   computes S0 = Q K0^T of tile 2i; warpgroup 1 owns columns 256..511 (O_R)
//   and computes S1 = Q K1^T of tile 2i + 1 (wgmma m64n64, all 576 columns).
//   Per pair, with m the running row max (log2 domain):
//     wg0: m0 = max(m, rowmax S0); O_L, l0 rescaled to m0; P0 = exp2(S0 - m0);
//          hands m0 over; O_L += P0 V0_L (P0 from registers);
//     wg1: m1 = max(m0, rowmax S1); O_R, l1 rescaled to m1; P1 = exp2(S1 - m1);
//          hands m1 over; O_R += P1 V1_R;
//     wg0: P0 * exp2(m0 - m1) into sP; O_L, l0 rescaled to m1;
//     wg1: O_R += (P0 scaled) V0_R; once it completed, P1 into sP;
//     wg0: O_L += P1 V1_L.
//   When warpgroup 0 hands its halves back depends on the key format (kEarly,
//   measured on an H100, 2026-12-06): with fp8 keys, whose producer
//   dequantises and is the slower side, L0 goes back as soon as P0 V0_L
//   completed (before the m1 wait) and L1 as soon as P1 V1_L completed
//   (before the next S0 waits for its tile): +6-9%. With bf16 keys that costs
//   4-9% (warpgroup 0 then stores P0 only after its product completed, and the
//   next S0 is no longer queued behind P1 V1_L), so there L0 goes back after
//   the P0 hand-over and L1 once the next S0's first half is issued. Same
//   products in the same order either way.
//   sP is the one shared block the math warpgroups write with generic stores;
//   every other block is written only by cp.async and read only by wgmma (no
//   region is written by both proxies, so racecheck has nothing to order).
//   Every hand-over between the math warpgroups (m0, m1, P0, P1, the row
//   sums) goes through an mbarrier: the writer's 128 threads arrive after
//   their stores (release), the reader waits on the phase (acquire), an
//   ordering racecheck follows (it reported the bar.arrive -> bar.sync
//   hand-overs on named barriers that this replaced).
//   Both end the pair at max m1 (so l0 + l1 is the row sum at the end), and
//   each warpgroup's softmax runs while the other's products occupy the tensor
//   cores. The S of the next pair is issued as soon as its first half lands.
//
// Barriers (scripts/models/sparse_prefill_barriers.py models the protocol; gp
// is the CTA's running pair count over its items, k its item count):
//   ready[b][h] (128 arrivals: every producer thread, when its copies land):
//     math waits parity gp & 1.
//   free[b][h] (4 arrivals: lane 0 of each warp of the warpgroup that reads
//     the half last, once that product completed): L0 and L1 by warpgroup 0
//     (its P0 V0_L and P1 V1_L), R0 and R1 by warpgroup 1 (P0 V0_R, P1 V1_R);
//     the producer waits parity
//     (gp & 1) ^ 1 (the first round passes at once).
//   q_full (128 arrivals, as ready): Q of item k; math waits parity k & 1.
//   q_empty (8 arrivals: every math warp once its last S of item k completed,
//     at once for an item without keys): the producer waits parity
//     (k & 1) ^ 1 before loading Q of item k.
//   hand-overs (every thread of the writing warpgroup arrives; the reader
//     waits parity gp & 1; each completes once per pair):
//     max0_full (m0 written into sm0 by warpgroup 0; its threads' reads of
//       sm1 of the previous pair are done, so warpgroup 1 may overwrite it),
//     max1_full (m1 written into sm1 by warpgroup 1; its reads of sm0 done),
//     p0_full (P0 written into sP and fenced for the async proxy; warpgroup
//       0's P1 V1_L of the previous pair, the last reader of sP, completed
//       in all its warps before they arrived at max0_full, which warpgroup 1
//       waited for before its own max1_full arrival that precedes P0),
//     p1_full (P1 written into sP by warpgroup 1).
//     A writer arrives for pair gp + 1 only after it waited for the reader's
//     hand-over of pair gp, so no barrier runs two phases ahead of a waiter.
//   sum_full (256 arrivals: every math thread, once its row sums of item k
//     are in red_sum[k & 1]; all wait parity k & 1, then read the other
//     warpgroup's). An item's write goes to the buffer the partner last read
//     two items back, before the previous item's sum_full, which the writer
//     waited for.
//   named barrier kBarW1 (warpgroup 1's 128 threads, bar.sync: P0 V0_R
//     completed in every warp before any overwrites sP).
#pragma once
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda/common/cuda_status.hpp"
#include "cuda/common/fp8.cuh"
#include "cuda/common/mbarrier.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/sparse/sparse_prefill_config.hpp"
#include "cuda/sparse/sparse_prefill_launch.hpp"
#include "cuda/sparse/sparse_prefill_params.hpp"
#include "mla/kv_cache.hpp"

namespace mla::cuda::sparse {

// Byte offset of the 16-byte piece `chunk` (0..71) of row `r` in a tile of
// SW128 blocks of `block_bytes` (block = 64 columns, piece j of row r at j ^ (r % 8)).
__device__ __forceinline__ uint32_t sw128_offset(int r, int chunk, int block_bytes) {
  return uint32_t((chunk >> 3) * block_bytes + r * 128 + (((chunk & 7) ^ (r & 7)) << 4));
}

// One work item: a token's block of up to 64 heads and its list.
struct Item {
  int token, h0, rows, n, pairs;
  const int32_t* list;
};
__device__ __forceinline__ Item make_item(const SparsePrefillParams& p, int item) {
  using C = SparsePrefillConfig;
  const int head_blocks = (p.h_q + C::kRows - 1) / C::kRows;
  Item it;
  it.token = item / head_blocks;
  it.h0 = (item % head_blocks) * C::kRows;
  it.rows = min(C::kRows, p.h_q - it.h0);
  it.n = p.topk_length == nullptr ? p.topk : min(max(p.topk_length[it.token], 0), p.topk);
  it.pairs = (it.n + 2 * C::kKeys - 1) / (2 * C::kKeys);
  it.list = p.indices + int64_t(it.token) * p.idx_ss;
  return it;
}

// The two list entries of tile t that a lane ballots (entries 64 t + lane and
// + 32; -1 past the list). The math warps read them one pair ahead of their
// use, so the global loads' latency is off the path to the next product.
struct TileIdx {
  int r0 = -1, r1 = -1;
};
__device__ __forceinline__ TileIdx load_tile_idx(const Item& it, int t, int lane) {
  const int j0 = t * 64 + lane, j1 = j0 + 32;
  return {j0 < it.n ? it.list[j0] : -1, j1 < it.n ? it.list[j1] : -1};
}

// Validity of the 64 entries of a tile as a bit mask (bit k: entry k is used
// and names a row of kv). Every lane of the warp gets the mask.
__device__ __forceinline__ uint64_t tile_valid_mask(const SparsePrefillParams& p, TileIdx x) {
  const uint32_t lo = __ballot_sync(0xffffffffu, x.r0 >= 0 && x.r0 < p.s_kv);
  const uint32_t hi = __ballot_sync(0xffffffffu, x.r1 >= 0 && x.r1 < p.s_kv);
  return uint64_t(lo) | (uint64_t(hi) << 32);
}

// A wgmma shared-memory descriptor built once (wgmma::desc_sw128) and moved
// by byte offsets: the start-address field is bits 0..13 = address / 16, and
// every shared address is below 2^18, so address + offset (multiples of 16)
// adds to the low word without a carry out of the field. One integer add per
// product instead of rebuilding the descriptor from the address.
struct SmemDesc {
  uint32_t lo, hi;
  __device__ __forceinline__ SmemDesc(uint32_t smem_byte_addr, uint32_t lbo, uint32_t sbo) {
    const uint64_t d = wgmma::desc_sw128(smem_byte_addr, lbo, sbo);
    lo = uint32_t(d), hi = uint32_t(d >> 32);
  }
  __device__ __forceinline__ uint64_t at(uint32_t byte_offset) const {
    return (uint64_t(hi) << 32) | (lo + (byte_offset >> 4));
  }
};

// S[64 x 64] (+)= Q[:, blocks b0 .. b1) K[:, same]^T, both K-major SW128
// tiles (descriptors of their first block); `zero`: the first product
// overwrites S instead of adding to it.
__device__ __forceinline__ void issue_s(float (&s)[8][4], const SmemDesc& q, const SmemDesc& k,
                                        int b0, int b1, bool zero) {
  using C = SparsePrefillConfig;
#pragma unroll
  for (int blk = b0; blk < b1; ++blk)
#pragma unroll
    for (int sub = 0; sub < 4; ++sub)
      wgmma::m64n64k16_ss(s, q.at(blk * C::kQBlockBytes + sub * 32),
                          k.at(blk * C::kKBlockBytes + sub * 32), !zero || blk > b0 || sub > 0);
}

// O (+)= P[64 x 64] V[64 keys x 256 columns from block v_block of tile v]
// (v: the tile's descriptor as a V operand): P from registers (the S
// accumulator layout repacked as k16 A fragments) ...
__device__ __forceinline__ void issue_pv_rs(float (&o)[32][4], const uint32_t (&pa)[4][4],
                                            const SmemDesc& v, int v_block) {
  using C = SparsePrefillConfig;
#pragma unroll
  for (int kk = 0; kk < C::kKeys / 16; ++kk)
    wgmma::m64n256k16_rs_tb(o, pa[kk], v.at(v_block * C::kKBlockBytes + kk * 16 * 128), true);
}
// ... or from a shared SW128 block.
__device__ __forceinline__ void issue_pv_ss(float (&o)[32][4], const SmemDesc& p, const SmemDesc& v,
                                            int v_block) {
  using C = SparsePrefillConfig;
#pragma unroll
  for (int kk = 0; kk < C::kKeys / 16; ++kk)
    wgmma::m64n256k16_ss_tb(o, p.at(kk * 32), v.at(v_block * C::kKBlockBytes + kk * 16 * 128),
                            true);
}

// Producer: Q of item `it` (this thread's 36 pieces), tracked by q_full.
__device__ __forceinline__ void load_q(const SparsePrefillParams& p, const Item& it,
                                       unsigned char* sQ, uint64_t* q_full, int ptid) {
  using C = SparsePrefillConfig;
  const __nv_bfloat16* const q =
      static_cast<const __nv_bfloat16*>(p.q) + int64_t(it.token) * p.q_ss + int64_t(it.h0) * p.q_sh;
  for (int i = ptid; i < C::kRows * C::kChunks; i += 128) {
    const int r = i / C::kChunks, chunk = i % C::kChunks;
    const bool valid = r < it.rows;
    ptx::cp_async_16(sQ + sw128_offset(r, chunk, C::kQBlockBytes),
                     q + (valid ? int64_t(r) * p.q_sh + chunk * 8 : 0), valid);
  }
  ptx::cp_async_mbar_arrive_noinc(q_full);
}

// Shared byte offset of the piece `sub` of key row kgrp + 16 pass in block 0
// of a tile is row_base + pass * 16 * 128: 16 rows per pass keep the row's
// swizzle phase (row % 8), so one base per thread serves every pass and block.
__device__ __forceinline__ uint32_t producer_row_base(int ptid) {
  using C = SparsePrefillConfig;
  static_assert(C::kKeysPerPass % 8 == 0, "a pass moves whole swizzle phases");
  return sw128_offset(ptid / C::kThreadsPerKey, ptid % C::kThreadsPerKey, C::kKBlockBytes);
}

// Producer: blocks [B0, B1) of this thread's 4 key rows of a tile (rows
// kgrp + 16 pass, piece `sub` of each block), once `free_bar` allows; tracked
// by `ready`. row[pass] < 0: zero-filled. Every address is a per-thread base
// plus a compile-time offset.
template <int B0, int B1>
__device__ __forceinline__ void gather_half(const SparsePrefillParams& p,
                                            const int (&row)[SparsePrefillConfig::kPasses],
                                            unsigned char* tile, uint64_t* ready,
                                            uint64_t* free_bar, uint32_t free_parity, int ptid) {
  using C = SparsePrefillConfig;
  const int sub = ptid % C::kThreadsPerKey;
  unsigned char* const dst = tile + producer_row_base(ptid);
  ptx::mbar_wait(free_bar, free_parity);
  const __nv_bfloat16* const kv = static_cast<const __nv_bfloat16*>(p.kv) + sub * 8;
#pragma unroll
  for (int pass = 0; pass < C::kPasses; ++pass) {
    const bool valid = row[pass] >= 0;
    const __nv_bfloat16* const src = kv + (valid ? int64_t(row[pass]) * p.kv_row_stride : 0);
#pragma unroll
    for (int blk = B0; blk < B1; ++blk)
      ptx::cp_async_16(dst + pass * C::kKeysPerPass * 128 + blk * C::kKBlockBytes,
                       src + blk * C::kCol, valid);
  }
  ptx::cp_async_mbar_arrive_noinc(ready);
}

// Eight e4m3 codes times `scale` as eight bf16 (exact: 4 significant bits and
// a power-of-two scale).
__device__ __forceinline__ uint4 dequant8(uint2 codes, float scale) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t word = i < 2 ? codes.x : codes.y;
    const float2 f = e4m3x2_to_float2(static_cast<uint16_t>(word >> (16 * (i & 1))));
    w[i] = ptx::pack_bf16x2(f.x * scale, f.y * scale);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// gather_half for fp8_ds_mla entries (mla/kv_cache.hpp's layout), blocks
// [B0, B1) (compile-time: the registers hold only those): the same pieces
// (row kgrp + 16 pass, piece `sub` of each block), each loaded into registers
// (8 e4m3 codes and their group's scale, or 8 bf16 of the rope block),
// dequantised and stored; two rows' loads in flight per thread. Then
// fence.proxy.async (the wgmma reads through the async proxy) and a plain
// arrival on `ready`.
template <int B0, int B1>
__device__ __forceinline__ void gather_half_fp8(const SparsePrefillParams& p,
                                                const int (&row)[SparsePrefillConfig::kPasses],
                                                unsigned char* tile, uint64_t* ready,
                                                uint64_t* free_bar, uint32_t free_parity,
                                                int ptid) {
  using C = SparsePrefillConfig;
  using F = Fp8DsMlaLayout;
  static_assert(F::kGroup == 2 * C::kCol && B0 % 2 == 0, "one scale covers blocks 2g, 2g + 1");
  static_assert(F::kRopeOffset % 16 == 0 && F::kEntryBytes % 16 == 0,
                "rope pieces are 16-byte aligned in every entry");
  constexpr int kNope = (B1 > C::kRopeBlock ? C::kRopeBlock : B1) - B0;  // e4m3 blocks
  constexpr bool kRope = B1 > C::kRopeBlock;
  constexpr int kInFlight = 2;  // rows per batch of loads (4 spill at 88 registers)
  static_assert(C::kPasses % kInFlight == 0, "whole batches");
  const int sub = ptid % C::kThreadsPerKey;
  unsigned char* const dst = tile + producer_row_base(ptid);
  ptx::mbar_wait(free_bar, free_parity);
  const uint8_t* const kv = static_cast<const uint8_t*>(p.kv);
#pragma unroll 1
  for (int pass0 = 0; pass0 < C::kPasses; pass0 += kInFlight) {
    uint2 codes[kInFlight][kNope];
    float scale[kInFlight][(kNope + 1) / 2];
    uint4 rope[kInFlight];
#pragma unroll
    for (int r = 0; r < kInFlight; ++r) {
      const int src = row[pass0 + r];
      const uint8_t* const e = kv + (src >= 0 ? int64_t(src) * p.kv_row_stride : 0);
#pragma unroll
      for (int b = 0; b < kNope; ++b)
        codes[r][b] = src >= 0 ? *reinterpret_cast<const uint2*>(e + (B0 + b) * C::kCol + sub * 8)
                               : make_uint2(0, 0);
#pragma unroll
      for (int g = 0; g < (kNope + 1) / 2; ++g)
        scale[r][g] = src >= 0
                          ? *reinterpret_cast<const float*>(e + F::kScaleOffset + 4 * (B0 / 2 + g))
                          : 0.f;
      if constexpr (kRope)
        rope[r] = src >= 0 ? *reinterpret_cast<const uint4*>(e + F::kRopeOffset + sub * 16)
                           : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int r = 0; r < kInFlight; ++r) {
      unsigned char* const d = dst + (pass0 + r) * C::kKeysPerPass * 128;
#pragma unroll
      for (int b = 0; b < kNope; ++b)
        *reinterpret_cast<uint4*>(d + (B0 + b) * C::kKBlockBytes) =
            dequant8(codes[r][b], scale[r][b / 2]);
      if constexpr (kRope) *reinterpret_cast<uint4*>(d + C::kRopeBlock * C::kKBlockBytes) = rope[r];
    }
  }
  wgmma::fence_proxy_async();
  ptx::mbar_arrive(ready);
}

// The list entries of the rows this producer thread copies for tile t (-1
// past the list), read one pair ahead of their use ...
__device__ __forceinline__ void tile_entries(const Item& it, int t, int ptid,
                                             int (&entry)[SparsePrefillConfig::kPasses]) {
  using C = SparsePrefillConfig;
  const int kgrp = ptid / C::kThreadsPerKey;
#pragma unroll
  for (int pass = 0; pass < C::kPasses; ++pass) {
    const int j = t * C::kKeys + kgrp + pass * C::kKeysPerPass;
    entry[pass] = j < it.n ? it.list[j] : -1;
  }
}
// ... and, at the use, the rows of kv they name (-1: none / invalid).
__device__ __forceinline__ void valid_rows(const SparsePrefillParams& p,
                                           const int (&entry)[SparsePrefillConfig::kPasses],
                                           int (&row)[SparsePrefillConfig::kPasses]) {
#pragma unroll
  for (int pass = 0; pass < SparsePrefillConfig::kPasses; ++pass)
    row[pass] = entry[pass] >= 0 && entry[pass] < p.s_kv ? entry[pass] : -1;
}

// Accumulator-layout S (row g / g + 8, columns 8i + 2c, +1) of tile t: masked
// (-inf), left unscaled; returns the two row maxima (quad-reduced) times
// scale_log2, in the log2 domain. The scale is > 0 (checked on the host), so
// the max of S times it is the max of the scaled S, and exp_rows folds the
// scale into one FFMA per element.
__device__ __forceinline__ void mask_max(float (&s)[8][4], uint64_t valid, float scale_log2, int c,
                                         float& mx0, float& mx1) {
  mx0 = -INFINITY, mx1 = -INFINITY;
  // This thread's columns 8 i + 2 c + e: one variable shift, then constant bits.
  const uint64_t mine = valid >> (2 * c);
  const uint32_t lo = uint32_t(mine), hi = uint32_t(mine >> 32);
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const bool ok = (((i < 4 ? lo : hi) >> ((i % 4) * 8 + e)) & 1u) != 0;
      s[i][e] = ok ? s[i][e] : -INFINITY;
      s[i][2 + e] = ok ? s[i][2 + e] : -INFINITY;
      mx0 = fmaxf(mx0, s[i][e]), mx1 = fmaxf(mx1, s[i][2 + e]);
    }
#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
  }
  mx0 *= scale_log2, mx1 *= scale_log2;
}

// A row whose max is still -inf (no valid key yet) exponentiates against 0: P = 0.
__device__ __forceinline__ float safe_max(float m) {
  return m == -INFINITY ? 0.f : m;
}

// P = exp2(S scale_log2 - m) in place (one FFMA and one exp2 per element);
// adds the row sums to l0 / l1 (thread partials).
__device__ __forceinline__ void exp_rows(float (&s)[8][4], float scale_log2, float m0, float m1,
                                         float& l0, float& l1) {
#pragma unroll
  for (int i = 0; i < 8; ++i) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      s[i][e] = ptx::fast_exp2(fmaf(s[i][e], scale_log2, -m0));
      s[i][2 + e] = ptx::fast_exp2(fmaf(s[i][2 + e], scale_log2, -m1));
    }
    l0 += s[i][0] + s[i][1], l1 += s[i][2] + s[i][3];
  }
}

// P (accumulator layout) as bf16 k16 A fragments: step kk holds columns
// 16 kk .. 16 kk + 15 = accumulator blocks 2 kk and 2 kk + 1.
__device__ __forceinline__ void pack_a(const float (&s)[8][4], uint32_t (&pa)[4][4]) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    pa[kk][0] = ptx::pack_bf16x2(s[2 * kk][0], s[2 * kk][1]);
    pa[kk][1] = ptx::pack_bf16x2(s[2 * kk][2], s[2 * kk][3]);
    pa[kk][2] = ptx::pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    pa[kk][3] = ptx::pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
  }
}

// P * (f0 rows g, f1 rows g + 8) as bf16 into a K-major SW128 block (the A
// operand of an SS product): row r, key k at r*128 + ((k/8) ^ (r%8))*16 + (k%8)*2.
__device__ __forceinline__ void store_p(const float (&s)[8][4], float f0, float f1,
                                        unsigned char* block, int r0, int c) {
  const int r1 = r0 + 8;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int within = 4 * c;  // (key % 8) * 2 bytes, key = 8 i + 2 c
    *reinterpret_cast<uint32_t*>(block + r0 * 128 + ((i ^ (r0 & 7)) << 4) + within) =
        ptx::pack_bf16x2(s[i][0] * f0, s[i][1] * f0);
    *reinterpret_cast<uint32_t*>(block + r1 * 128 + ((i ^ (r1 & 7)) << 4) + within) =
        ptx::pack_bf16x2(s[i][2] * f1, s[i][3] * f1);
  }
}

// Keeps the compiler from reusing the A-fragment registers of an RS product
// before the wait that completes it (the asm names them as inputs only).
__device__ __forceinline__ void hold_a(uint32_t (&pa)[4][4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(pa[i][e])::"memory");
}

__device__ __forceinline__ void scale_o(float (&o)[32][4], float a0, float a1) {
  if (a0 != 1.f || a1 != 1.f) {  // rare once the row maxima settle
#pragma unroll
    for (int i = 0; i < 32; ++i) o[i][0] *= a0, o[i][1] *= a0, o[i][2] *= a1, o[i][3] *= a1;
  }
}

// The one named barrier (the hand-overs between the warpgroups are mbarriers).
enum NamedBarrier : int { kBarW1 = 1 };

template <bool kFp8>
__global__ void __launch_bounds__(SparsePrefillConfig::kThreads, 1)
    sparse_prefill_kernel(const __grid_constant__ SparsePrefillParams p, int n_items) {
  using C = SparsePrefillConfig;
  constexpr bool kEarly = kFp8;  // warpgroup 0's release points (the header says why)
  using namespace ptx;
  extern __shared__ unsigned char smem_raw[];
  // Swizzle atoms must sit on 1024-byte boundaries (the hardware swizzles by address).
  unsigned char* const sQ = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  unsigned char* const sK = sQ + C::kSmemQ;  // [buffer][block]
  unsigned char* const sP = sK + C::kBuffers * C::kSmemK;
  float* const sm0 = reinterpret_cast<float*>(sP + C::kSmemP);  // [row] m0 of the pair
  float* const sm1 = sm0 + C::kRows;                            // [row] m1 of the pair
  float* const red_sum = sm1 + C::kRows;                        // [item & 1][wg][row]
  uint64_t* const ready = reinterpret_cast<uint64_t*>(red_sum + 2 * C::kMathWgs * C::kRows);
  uint64_t* const free_bar = ready + C::kBuffers * C::kHalves;  // [buffer * 2 + half]
  uint64_t* const q_full = free_bar + C::kBuffers * C::kHalves;
  uint64_t* const q_empty = q_full + 1;
  uint64_t* const max0_full = q_empty + 1;
  uint64_t* const max1_full = max0_full + 1;
  uint64_t* const p0_full = max1_full + 1;
  uint64_t* const p1_full = p0_full + 1;
  uint64_t* const sum_full = p1_full + 1;
  static_assert(C::kHandOvers == 5, "max0, max1, p0, p1, sum");
  constexpr int L = 0, R = 1;

  const int tid = threadIdx.x, wg = tid / 128;
  if (tid == 0) {
    for (int i = 0; i < C::kBuffers * C::kHalves; ++i) {
      mbar_init(&ready[i], 128);
      mbar_init(&free_bar[i], 4);
    }
    mbar_init(q_full, 128);
    mbar_init(q_empty, C::kMathThreads / 32);
    mbar_init(max0_full, 128);
    mbar_init(max1_full, 128);
    mbar_init(p0_full, 128);
    mbar_init(p1_full, 128);
    mbar_init(sum_full, C::kMathThreads);
    mbar_fence_init();
  }
  __syncthreads();

  if (wg == C::kMathWgs) {  // ---- producer ----
    wgmma::setmaxnreg_dec<kFp8 ? C::kProducerRegsFp8 : C::kProducerRegs>();
    const int ptid = tid - C::kMathThreads;
    int gp = 0, k = 0;
    for (int item = blockIdx.x; item < n_items; item += gridDim.x, ++k) {
      const Item it = make_item(p, item);
      mbar_wait(q_empty, (k & 1) ^ 1);
      load_q(p, it, sQ, q_full, ptid);
      int next0[C::kPasses], next1[C::kPasses];  // entries of the next pair's tiles
      tile_entries(it, 0, ptid, next0);
      tile_entries(it, 1, ptid, next1);
      for (int i = 0; i < it.pairs; ++i, ++gp) {
        int row0[C::kPasses], row1[C::kPasses];
        valid_rows(p, next0, row0);
        valid_rows(p, next1, row1);
        tile_entries(it, 2 * i + 2, ptid, next0);
        tile_entries(it, 2 * i + 3, ptid, next1);
        const uint32_t par = (gp & 1) ^ 1;
        unsigned char* const k0 = sK;
        unsigned char* const k1 = sK + C::kSmemK;
        // In the order the halves free up: L0 (wg0's P0 V0_L), R1 (wg1's P1
        // V1_R), R0 (wg1's P0 V0_R), L1 (wg0's P1 V1_L).
        if constexpr (kFp8) {
          constexpr int kL = C::kLBlocks, kAll = C::kQkBlocks;
          gather_half_fp8<0, kL>(p, row0, k0, &ready[0 + L], &free_bar[0 + L], par, ptid);
          gather_half_fp8<kL, kAll>(p, row1, k1, &ready[2 + R], &free_bar[2 + R], par, ptid);
          gather_half_fp8<kL, kAll>(p, row0, k0, &ready[0 + R], &free_bar[0 + R], par, ptid);
          gather_half_fp8<0, kL>(p, row1, k1, &ready[2 + L], &free_bar[2 + L], par, ptid);
        } else {
          constexpr int kL = C::kLBlocks, kAll = C::kQkBlocks;
          gather_half<0, kL>(p, row0, k0, &ready[0 + L], &free_bar[0 + L], par, ptid);
          gather_half<kL, kAll>(p, row1, k1, &ready[2 + R], &free_bar[2 + R], par, ptid);
          gather_half<kL, kAll>(p, row0, k0, &ready[0 + R], &free_bar[0 + R], par, ptid);
          gather_half<0, kL>(p, row1, k1, &ready[2 + L], &free_bar[2 + L], par, ptid);
        }
      }
    }
    cp_async_wait<0>();
    return;
  }

  // ---- math warpgroups ----
  wgmma::setmaxnreg_inc<kFp8 ? C::kMathRegsFp8 : C::kMathRegs>();
  // The warpgroup index through a shuffle: provably warp-uniform for ptxas,
  // which otherwise treats the two warpgroups' wgmma paths as divergent and
  // serialises them.
  const int w = __shfl_sync(0xffffffffu, wg, 0), lane = tid % 32, warp = (tid % 128) / 32;
  const int c = lane % 4;
  const int r0 = warp * 16 + lane / 4, r1 = r0 + 8;  // the two accumulator rows of this thread
  const float scale_log2 = p.softmax_scale * 1.4426950408889634f;
  // Operand descriptors: Q, K0, K1 as S operands (K-major, 16-byte leading
  // offset), K0, K1 as V operands (MN-major: a block of 64 columns apart), P.
  const uint32_t k0_addr = smem_addr(sK), k1_addr = k0_addr + C::kSmemK;
  const SmemDesc q_desc(smem_addr(sQ), 16, 1024), p_desc(smem_addr(sP), 16, 1024);
  const SmemDesc k0_desc(k0_addr, 16, 1024), k1_desc(k1_addr, 16, 1024);
  const SmemDesc v0_desc(k0_addr, C::kKBlockBytes, 1024), v1_desc(k1_addr, C::kKBlockBytes, 1024);
  auto release = [&](uint64_t* bar) {  // after this warp's products reading it completed
    __syncwarp();
    if (lane == 0) mbar_arrive(bar);
  };

  int gp = 0, k = 0;
  for (int item = blockIdx.x; item < n_items; item += gridDim.x, ++k) {
    const Item it = make_item(p, item);
    float o[32][4];
#pragma unroll
    for (int i = 0; i < 32; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float s[8][4];
    uint32_t pa[4][4];
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;  // rows r0, r1; log2 domain
    mbar_wait(q_full, k & 1);

    if (w == 0) {
      // ---------------- warpgroup 0: tiles 2i, output columns 0..255 ----------------
      uint64_t valid = 0;
      TileIdx next;                       // entries of the next pair's tile 2i + 2
      auto issue_s0 = [&](int pair_gp) {  // S0 of the pair; returns with it complete
        mbar_wait(&ready[0 + L], pair_gp & 1);
        wgmma::fence_proxy_async();
        wgmma::fence();
        issue_s(s, q_desc, k0_desc, 0, C::kLBlocks, true);
        wgmma::commit();
      };
      if (it.pairs > 0) {
        valid = tile_valid_mask(p, load_tile_idx(it, 0, lane));
        next = load_tile_idx(it, 2, lane);
        issue_s0(gp);
        mbar_wait(&ready[0 + R], gp & 1);
        wgmma::fence_proxy_async();
        issue_s(s, q_desc, k0_desc, C::kLBlocks, C::kQkBlocks, false);
        wgmma::commit();
        wgmma::wait<0>();
        wgmma::fence_regs(s);
      }
      if (it.pairs <= 1) release(q_empty);
      for (int i = 0; i < it.pairs; ++i, ++gp) {
        float mx0, mx1;
        mask_max(s, valid, scale_log2, c, mx0, mx1);
        const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);  // m0 of the pair, per row
        const float ns0 = safe_max(n0), ns1 = safe_max(n1);
        const float a0 = fast_exp2(m0 - ns0), a1 = fast_exp2(m1 - ns1);
        scale_o(o, a0, a1);
        l0 *= a0, l1 *= a1;
        exp_rows(s, scale_log2, ns0, ns1, l0, l1);
        if (c == 0) sm0[r0] = n0, sm0[r1] = n1;
        mbar_arrive(max0_full);  // every thread: also its reads of sm1 (last pair) are done
        pack_a(s, pa);
        wgmma::fence();
        issue_pv_rs(o, pa, v0_desc, 0);  // O_L += P0 V0_L
        wgmma::commit();
        if constexpr (kEarly) {  // L0 back to the producer before the wait for m1
          wgmma::wait<0>();
          wgmma::fence_regs(o);
          hold_a(pa);
          release(&free_bar[0 + L]);
        }
        mbar_wait(max1_full, gp & 1);
        const float x0 = sm1[r0], x1 = sm1[r1];  // m1 of the pair
        const float b0 = fast_exp2(n0 - safe_max(x0)), b1 = fast_exp2(n1 - safe_max(x1));
        store_p(s, b0, b1, sP, r0, c);
        wgmma::fence_proxy_async();
        mbar_arrive(p0_full);
        if constexpr (!kEarly) {
          wgmma::wait<0>();
          wgmma::fence_regs(o);
          hold_a(pa);
          release(&free_bar[0 + L]);
        }
        scale_o(o, b0, b1);
        l0 *= b0, l1 *= b1;
        m0 = x0, m1 = x1;
        mbar_wait(p1_full, gp & 1);
        wgmma::fence();
        issue_pv_ss(o, p_desc, v1_desc, 0);  // O_L += P1 V1_L
        wgmma::commit();
        if constexpr (kEarly) {  // L1 back before the next S0 waits for its tile
          wgmma::wait<0>();
          wgmma::fence_regs(o);
          release(&free_bar[2 + L]);
        }
        if (i + 1 < it.pairs) {
          valid = tile_valid_mask(p, next);
          next = load_tile_idx(it, 2 * i + 4, lane);
          issue_s0(gp + 1);
          if constexpr (!kEarly) {
            wgmma::wait<1>();  // P1 V1_L done
            wgmma::fence_regs(o);
            release(&free_bar[2 + L]);
          }
          mbar_wait(&ready[0 + R], (gp + 1) & 1);
          wgmma::fence_proxy_async();
          issue_s(s, q_desc, k0_desc, C::kLBlocks, C::kQkBlocks, false);
          wgmma::commit();
          wgmma::wait<0>();
          wgmma::fence_regs(s);
          if (i + 2 == it.pairs) release(q_empty);
        } else if constexpr (!kEarly) {
          wgmma::wait<0>();
          wgmma::fence_regs(o);
          release(&free_bar[2 + L]);
        }
      }
    } else {
      // ---------------- warpgroup 1: tiles 2i + 1, output columns 256..511 ----------------
      if (it.pairs == 0) release(q_empty);
      TileIdx next = load_tile_idx(it, 1, lane);  // entries of this pair's tile 2i + 1
      for (int i = 0; i < it.pairs; ++i, ++gp) {
        const uint64_t valid = tile_valid_mask(p, next);
        next = load_tile_idx(it, 2 * i + 3, lane);
        mbar_wait(&ready[2 + R], gp & 1);  // R1 frees first: start there
        wgmma::fence_proxy_async();
        wgmma::fence();
        issue_s(s, q_desc, k1_desc, C::kLBlocks, C::kQkBlocks, true);
        mbar_wait(&ready[2 + L], gp & 1);
        wgmma::fence_proxy_async();
        issue_s(s, q_desc, k1_desc, 0, C::kLBlocks, false);
        wgmma::commit();
        wgmma::wait<0>();
        wgmma::fence_regs(s);
        if (i + 1 == it.pairs) release(q_empty);
        float mx0, mx1;
        mask_max(s, valid, scale_log2, c, mx0, mx1);
        mbar_wait(max0_full, gp & 1);
        const float n0 = fmaxf(sm0[r0], mx0), n1 = fmaxf(sm0[r1], mx1);  // m1 of the pair
        const float ns0 = safe_max(n0), ns1 = safe_max(n1);
        const float a0 = fast_exp2(m0 - ns0), a1 = fast_exp2(m1 - ns1);
        scale_o(o, a0, a1);
        l0 *= a0, l1 *= a1;
        exp_rows(s, scale_log2, ns0, ns1, l0, l1);
        m0 = n0, m1 = n1;
        if (c == 0) sm1[r0] = n0, sm1[r1] = n1;
        mbar_arrive(max1_full);  // every thread: also its reads of sm0 are done
        pack_a(s, pa);
        wgmma::fence();
        issue_pv_rs(o, pa, v1_desc, C::kLBlocks);  // O_R += P1 V1_R
        wgmma::commit();
        mbar_wait(p0_full, gp & 1);
        issue_pv_ss(o, p_desc, v0_desc, C::kLBlocks);  // O_R += P0 V0_R
        wgmma::commit();
        wgmma::wait<1>();
        wgmma::fence_regs(o);
        hold_a(pa);
        release(&free_bar[2 + R]);
        wgmma::wait<0>();
        wgmma::fence_regs(o);
        named_barrier_sync(kBarW1, 128);  // every warp's part of P0 V0_R read sP
        store_p(s, 1.f, 1.f, sP, r0, c);
        wgmma::fence_proxy_async();
        mbar_arrive(p1_full);
        release(&free_bar[0 + R]);
      }
    }

    // Row sums: the quad's partials, then the other warpgroup's (both end at the same max).
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
      l0 += __shfl_xor_sync(0xffffffffu, l0, off);
      l1 += __shfl_xor_sync(0xffffffffu, l1, off);
    }
    float* const sums = red_sum + (k & 1) * C::kMathWgs * C::kRows;
    if (c == 0) sums[w * C::kRows + r0] = l0, sums[w * C::kRows + r1] = l1;
    mbar_arrive(sum_full);
    mbar_wait(sum_full, k & 1);
    l0 += sums[(1 - w) * C::kRows + r0], l1 += sums[(1 - w) * C::kRows + r1];
    const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
    __nv_bfloat16* const out = static_cast<__nv_bfloat16*>(p.out) + int64_t(it.token) * p.out_ss +
                               int64_t(it.h0) * p.out_sh;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
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

template <bool kFp8>
Status launch_sparse_prefill_as(const SparsePrefillParams& p, cudaStream_t stream) {
  using C = SparsePrefillConfig;
  static const cudaError_t attr = cudaFuncSetAttribute(
      sparse_prefill_kernel<kFp8>, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes);
  MLA_CUDA_TRY(attr, "cudaFuncSetAttribute(sparse_prefill_kernel)");
  // setmaxnreg.inc would wait forever for registers the CTA was not given.
  static const int regs = [] {
    cudaFuncAttributes fa{};
    return cudaFuncGetAttributes(&fa, sparse_prefill_kernel<kFp8>) == cudaSuccess ? fa.numRegs : -1;
  }();
  if (regs < C::kLaunchRegs)
    return Status(Errc::unsupported,
                  "sparse_prefill_kernel: compiled with " + std::to_string(regs) +
                      " registers per thread; its warpgroup register budgets need " +
                      std::to_string(C::kLaunchRegs));
  DeviceFacts dev;
  int id = 0;
  MLA_CUDA_TRY(cudaGetDevice(&id), "cudaGetDevice");
  MLA_TRY(device_facts(id, &dev));
  // Persistent: one CTA per SM (the shared memory allows one), items round-robin.
  const int items = int(int64_t(p.s_q) * ((p.h_q + C::kRows - 1) / C::kRows));
  const int ctas = std::min(items, p.max_ctas > 0 ? p.max_ctas : dev.sm_count);
  sparse_prefill_kernel<kFp8><<<ctas, C::kThreads, C::kSmemBytes, stream>>>(p, items);
  return check_launch("sparse_prefill_kernel");
}

}  // namespace mla::cuda::sparse
