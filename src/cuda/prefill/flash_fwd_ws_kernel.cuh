// Warp-specialised prefill attention on Hopper (FlashAttention-3 scheme, sm_90a):
// Kernel::tma_warp_specialized (flash_fwd_params.hpp), one CTA = 128 queries
// of one (sequence, head), three warpgroups:
//   producer (warpgroup 0, one thread): TMA loads of Q once, then K and V tiles
//     of 128 keys into a two-stage ring, each stage guarded by a full barrier
//     (transaction bytes) and an empty barrier (the consumers' release). K and
//     V have separate barriers, so S of a tile can start before its V lands;
//   consumers (warpgroups 1, 2: 64 query rows each): S = Q K^T (wgmma, both
//     operands in shared memory), online softmax in registers, O += P V (P
//     from registers). The S product of tile j is issued before the P.V
//     product of tile j - 1 and the softmax of j runs while P.V(j - 1) is in
//     flight: the tensor cores see one product queued behind the other.
// The producer gives registers back (setmaxnreg) so that each consumer thread
// holds S (64 fp32), O (64 fp32) and P (32 bf16x2) without spilling.
//
// K = [k_nope (per head) ; k_rope (shared by the heads in MLA)]: one K stage is
// three 64-column SW128 blocks, two from the k_nope map and one from the k_rope
// map, in the layout the S descriptors read. Key tiles are visited from the
// last to the first, so the (at most two) tiles that need the causal or
// length mask come first. Rows past the end of a tensor arrive as zeros (TMA
// bounds); rows of the neighbouring sequence are masked to -inf in S and get
// P = 0 (their values are the caller's other tokens, finite).
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/common/mbarrier.cuh"
#include "cuda/common/tma.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/prefill/flash_fwd_params.hpp"
#include "cuda/prefill/flash_fwd_ws_maps.hpp"
#include "cuda/prefill/flash_softmax.cuh"

namespace mla::cuda::prefill {

struct FlashWsTraits {
  static constexpr int kBlockM = 128, kBlockN = 128;
  static constexpr int kConsumers = 2;  // warpgroups of 64 query rows
  static constexpr int kThreads = (kConsumers + 1) * 128;
  static constexpr int kConsumerThreads = kConsumers * 128;
  static constexpr int kDnope = 128, kDrope = 64, kDqk = 192, kDv = 128;
  static constexpr int kCol = 64;  // bf16 columns of one 128-byte swizzle block
  static constexpr int kQBlockBytes = kBlockM * 128;
  static constexpr int kKBlockBytes = kBlockN * 128;
  static constexpr int kSmemQ = kQBlockBytes * (kDqk / kCol);
  static constexpr int kSmemK = kKBlockBytes * (kDqk / kCol);
  static constexpr int kSmemV = kKBlockBytes * (kDv / kCol);
  static constexpr int kStages = 2;
  static constexpr int kBarriers = 1 + 4 * kStages;  // q_full; k/v full, k/v empty per stage
  static constexpr int kSmemBytes =
      1024 /* alignment slack */ + kSmemQ + kStages * (kSmemK + kSmemV) + 8 * kBarriers;
  // Producer low, consumers high; the sum stays within the SM's 64K registers.
  static constexpr int kProducerRegs = 24, kConsumerRegs = 240;
  // Heads are scheduled in groups whose k_nope + v (bytes per head: keys x
  // (128 + 128) x 2) fit in this much L2 together (about half of Hopper's L2,
  // leaving room for the Q / O streams and the shared k_rope).
  static constexpr int64_t kL2GroupBytes = int64_t(24) << 20;
  static_assert(kBlockM == kConsumers * 64, "a consumer warpgroup owns 64 query rows (wgmma M)");
  static_assert(kBlockN <= 256 && kBlockM <= 256, "a TMA box spans at most 256 rows");
  static_assert(kDnope % kCol == 0 && kDrope == kCol && kDv % kCol == 0,
                "K and V tiles are whole 64-column SW128 blocks; rope is exactly one");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per CTA on Hopper is 227 KB");
  static_assert(kProducerRegs * 128 + kConsumerRegs * kConsumerThreads <= 65536,
                "setmaxnreg budgets must fit the register file");
};

// Block order (a 1-D grid): sequence outermost; then heads in groups of
// `head_group`; inside a group, query tiles from the heaviest (the last
// queries), all heads of the group at each tile. The CTAs resident at one
// time then read the key prefixes of a few heads, which stay in L2 (heads
// fastest over all heads would stream every head's K/V from HBM once per
// query tile), and the grid still ends on the lightest tiles.
struct WsBlock {
  int b, m_block, head;
};
__device__ __forceinline__ WsBlock ws_block(int lin, int m_blocks, int heads, int head_group) {
  WsBlock w;
  const int per_seq = m_blocks * heads;
  w.b = lin / per_seq;
  int r = lin - w.b * per_seq;
  const int g0 = r / (m_blocks * head_group) * head_group;  // first head of the group
  const int gsize = min(head_group, heads - g0);            // the last group may be short
  r -= g0 * m_blocks;
  w.m_block = r / gsize;
  w.head = g0 + r % gsize;
  return w;
}

template <bool kOutF32>
__global__ void __launch_bounds__(FlashWsTraits::kThreads, 1)
    flash_fwd_ws_kernel(const __grid_constant__ FlashFwdParams p,
                        const __grid_constant__ FlashWsMaps maps, int head_group) {
  using T = FlashWsTraits;
  using namespace ptx;
  extern __shared__ unsigned char smem_raw[];
  // Swizzle atoms must sit on 1024-byte boundaries (the hardware swizzles by address).
  unsigned char* const sQ = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  unsigned char* const sK = sQ + T::kSmemQ;
  unsigned char* const sV = sK + T::kStages * T::kSmemK;
  uint64_t* const bars = reinterpret_cast<uint64_t*>(sV + T::kStages * T::kSmemV);
  uint64_t* const q_full = bars;
  uint64_t* const k_full = bars + 1;
  uint64_t* const v_full = k_full + T::kStages;
  uint64_t* const k_empty = v_full + T::kStages;
  uint64_t* const v_empty = k_empty + T::kStages;

  const int m_blocks = (p.max_seqlen_q + T::kBlockM - 1) / T::kBlockM;
  const WsBlock blk = ws_block(int(blockIdx.x), m_blocks, p.heads, head_group);
  const TileCoords tc = tile_coords<T::kBlockM, T::kBlockN>(p, blk.m_block, blk.b);
  if (!tc.valid) return;
  const int head = blk.head;
  const int tid = threadIdx.x, wg = tid / 128;
  const int n_tiles = tc.n_tiles;

  if (tid == 0) {
    mbar_init(q_full, 1);
    for (int s = 0; s < T::kStages; ++s) {
      mbar_init(&k_full[s], 1);
      mbar_init(&v_full[s], 1);
      mbar_init(&k_empty[s], T::kConsumerThreads);
      mbar_init(&v_empty[s], T::kConsumerThreads);
    }
    mbar_fence_init();
  }
  __syncthreads();

  if (wg == 0) {  // ---- producer ----
    wgmma::setmaxnreg_dec<T::kProducerRegs>();
    if (tid != 0 || n_tiles == 0) return;
    const int rope_head = p.k_rope_head_stride != 0 ? head : 0;
    mbar_arrive_expect_tx(q_full, T::kSmemQ);
    for (int c = 0; c < T::kDqk / T::kCol; ++c)
      tma_load_3d(sQ + c * T::kQBlockBytes, &maps.q, c * T::kCol, head, tc.q_begin + tc.q0, q_full);
    for (int it = 0; it < n_tiles; ++it) {
      const int st = it % T::kStages;
      const uint32_t ph = (it / T::kStages) & 1;
      const int row = tc.k_begin + (n_tiles - 1 - it) * T::kBlockN;
      unsigned char* const dK = sK + st * T::kSmemK;
      unsigned char* const dV = sV + st * T::kSmemV;
      mbar_wait(&k_empty[st], ph ^ 1);  // round 0 passes at once (fresh barrier)
      mbar_arrive_expect_tx(&k_full[st], T::kSmemK);
      for (int c = 0; c < T::kDnope / T::kCol; ++c)
        tma_load_3d(dK + c * T::kKBlockBytes, &maps.k_nope, c * T::kCol, head, row, &k_full[st]);
      tma_load_3d(dK + (T::kDnope / T::kCol) * T::kKBlockBytes, &maps.k_rope, 0, rope_head, row,
                  &k_full[st]);
      mbar_wait(&v_empty[st], ph ^ 1);
      mbar_arrive_expect_tx(&v_full[st], T::kSmemV);
      for (int c = 0; c < T::kDv / T::kCol; ++c)
        tma_load_3d(dV + c * T::kKBlockBytes, &maps.v, c * T::kCol, head, row, &v_full[st]);
    }
    return;
  }

  // ---- consumers ----
  wgmma::setmaxnreg_inc<T::kConsumerRegs>();
  const int cw = wg - 1, warp = (tid / 32) % 4, lane = tid % 32;
  const int g = lane / 4, cq = lane % 4;
  const int wg_row0 = tc.q0 + cw * 64;          // first query row of this warpgroup
  const int my_row0 = wg_row0 + warp * 16 + g;  // this thread's first row (second: +8)
  const int lim[2] = {p.causal ? min(tc.seq_k - 1, my_row0 + tc.diag) : tc.seq_k - 1,
                      p.causal ? min(tc.seq_k - 1, my_row0 + 8 + tc.diag) : tc.seq_k - 1};
  const float scale_log2 = p.softmax_scale * 1.4426950408889634f;

  constexpr int kNT = T::kBlockN / 8, kOT = T::kDv / 8;
  float o[kOT][4];
  zero_acc(o);
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.f, 0.f};

  if (n_tiles > 0) {
    float s[kNT][4];  // zero only so that the first wgmma's "+f" operands are defined
#pragma unroll
    for (int i = 0; i < kNT; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
    uint32_t pf[kNT / 2][4];
    const uint32_t q_addr = smem_addr(sQ) + cw * 64 * 128;
    auto issue_s = [&](int st) {
      const uint32_t k_addr = smem_addr(sK + st * T::kSmemK);
#pragma unroll
      for (int ks = 0; ks < T::kDqk / 16; ++ks) {
        const uint32_t off = (ks / 4) * T::kQBlockBytes + (ks % 4) * 32;  // block, k16 step in it
        const uint32_t koff = (ks / 4) * T::kKBlockBytes + (ks % 4) * 32;
        wgmma::m64n128k16_ss(s, wgmma::desc_sw128(q_addr + off, 16, 1024),
                             wgmma::desc_sw128(k_addr + koff, 16, 1024), ks > 0);
      }
      wgmma::commit();
    };
    auto issue_pv = [&](int st) {
      const uint32_t v_addr = smem_addr(sV + st * T::kSmemV);
#pragma unroll
      for (int kk = 0; kk < T::kBlockN / 16; ++kk)  // 16 keys = 2 KB further; LBO: next 64 dims
        wgmma::m64n128k16_rs_tb(
            o, pf[kk], wgmma::desc_sw128(v_addr + kk * 16 * 128, T::kKBlockBytes, 1024), true);
      wgmma::commit();
    };
    // Mask (only tiles crossing the diagonal or the end of the keys) and the
    // max/exp half of the softmax of the tile visited at step `it`.
    auto softmax_tile = [&](int it, float(&alpha)[2]) {
      const int n0 = (n_tiles - 1 - it) * T::kBlockN;
      const bool need_mask =
          n0 + T::kBlockN > tc.seq_k || (p.causal && n0 + T::kBlockN - 1 > wg_row0 + tc.diag);
      if (need_mask) mask_scores(s, n0, cq, lim);
      softmax_exp</*kFtzExp=*/true>(s, row_max, row_sum, scale_log2, alpha);
    };
    auto fence_pf = [&] {
#pragma unroll
      for (int i = 0; i < kNT / 2; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(pf[i][e])::"memory");
    };

    mbar_wait(q_full, 0);
    // Step 0: S alone.
    mbar_wait(&k_full[0], 0);
    wgmma::fence();
    issue_s(0);
    wgmma::wait<0>();
    wgmma::fence_regs(s);
    mbar_arrive(&k_empty[0]);
    {
      float alpha[2];
      softmax_tile(0, alpha);  // o is still zero: no rescale
      pack_p(s, pf);
    }
    for (int it = 1; it < n_tiles; ++it) {
      const int st = it % T::kStages, pst = (it - 1) % T::kStages;
      const uint32_t ph = (it / T::kStages) & 1, pph = ((it - 1) / T::kStages) & 1;
      mbar_wait(&k_full[st], ph);
      mbar_wait(&v_full[pst], pph);
      wgmma::fence();
      issue_s(st);    // S(it) queued first ...
      issue_pv(pst);  // ... then P.V(it - 1)
      wgmma::wait<1>();
      wgmma::fence_regs(s);
      mbar_arrive(&k_empty[st]);
      float alpha[2];
      softmax_tile(it, alpha);  // runs while P.V(it - 1) is in flight
      wgmma::wait<0>();
      wgmma::fence_regs(o);
      fence_pf();  // the old P stays in its registers until P.V(it - 1) has read it
      mbar_arrive(&v_empty[pst]);
      // Past the first tiles the running max rarely moves: a warp whose rows
      // all kept theirs (alpha exactly 1) skips the 64 multiplies by 1.
      if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) rescale_rows(o, alpha);
      pack_p(s, pf);
    }
    const int lst = (n_tiles - 1) % T::kStages;
    mbar_wait(&v_full[lst], ((n_tiles - 1) / T::kStages) & 1);
    wgmma::fence();
    issue_pv(lst);
    wgmma::wait<0>();
    wgmma::fence_regs(o);
    mbar_arrive(&v_empty[lst]);
  }
  write_rows<kOutF32>(p, o, row_max, row_sum, my_row0, tc.seq_q, tc.q_begin, head, cq);
}

}  // namespace mla::cuda::prefill
