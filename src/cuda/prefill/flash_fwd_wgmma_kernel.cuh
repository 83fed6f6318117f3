// Prefill attention on Hopper's warpgroup MMA (wgmma, sm_90a) fed by cp.async:
// Kernel::cp_async_wgmma (flash_fwd_params.hpp), one CTA = 128 queries of
// one (sequence, head) as two warpgroups of 64 rows. S = Q K^T reads Q and K
// from shared memory (K-major, 128-byte swizzle); O += P V takes P from
// registers and V from shared memory (MN-major, transposed by the MMA). Keys
// stream in 64-key tiles through a two-stage cp.async pipeline.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/common/wgmma.cuh"
#include "cuda/prefill/flash_fwd_params.hpp"
#include "cuda/prefill/flash_softmax.cuh"
#include "cuda/prefill/prefill_ptx.cuh"

namespace mla::cuda::prefill {

struct FlashWgmmaTraits {
  static constexpr int kBlockM = 128, kBlockN = 64;
  static constexpr int kWarpgroups = 2, kThreads = kWarpgroups * 128;
  static constexpr int kDnope = 128, kDqk = 192, kDv = 128;
  // 128-byte swizzle: a tile is stored as column blocks of 64 bf16 (128 B per
  // row), each block [rows][128 B] with 16-byte chunk c of row r at c ^ (r & 7).
  static constexpr int kBlockCols = 64;
  static constexpr int kQBlockBytes = kBlockM * 128;  // one 64-column block of Q
  static constexpr int kKBlockBytes = kBlockN * 128;
  static constexpr int kVBlockBytes = kBlockN * 128;  // 64 dims x 64 keys
  static constexpr int kSmemQ = kQBlockBytes * (kDqk / kBlockCols);
  static constexpr int kSmemK = kKBlockBytes * (kDqk / kBlockCols);
  static constexpr int kSmemV = kVBlockBytes * (kDv / kBlockCols);
  static constexpr int kStages = 2;
  static constexpr int kSmemBytes =
      1024 /* alignment slack */ + kSmemQ + kStages * (kSmemK + kSmemV);
  static_assert(kBlockM == kWarpgroups * 64, "a warpgroup owns 64 query rows (wgmma M = 64)");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per CTA on Hopper is 227 KB");
  static_assert(kDqk % kBlockCols == 0 && kDv % kBlockCols == 0, "whole 128-byte swizzle columns");
};

// Byte offset of 16-byte chunk `c` (of 8 bf16) in row `r` of a swizzled tile
// whose 64-column blocks are `block_bytes` apart.
__device__ __forceinline__ uint32_t sw128_offset(int r, int c, int block_bytes) {
  return uint32_t((c / 8) * block_bytes + r * 128 + (((c % 8) ^ (r & 7)) << 4));
}

template <bool kOutF32>
__global__ void __launch_bounds__(FlashWgmmaTraits::kThreads, 1)
    flash_fwd_wgmma_kernel(const FlashFwdParams p) {
  using T = FlashWgmmaTraits;
  extern __shared__ unsigned char smem_raw[];
  // Swizzle atoms must sit on 1024-byte boundaries (the hardware swizzles by address).
  const uint32_t base = (smem_addr(smem_raw) + 1023u) & ~1023u;
  const uint32_t sQ = base;
  const uint32_t sK = sQ + T::kSmemQ;
  const uint32_t sV = sK + T::kStages * T::kSmemK;

  const TileCoords tc = tile_coords<T::kBlockM, T::kBlockN>(p);
  if (!tc.valid) return;
  const int head = blockIdx.y;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wg = warp / 4, wl = warp % 4;

  const __nv_bfloat16* gQ = static_cast<const __nv_bfloat16*>(p.q) +
                            int64_t(tc.q_begin) * p.q_row_stride + int64_t(head) * p.q_head_stride;
  const __nv_bfloat16* gKn = static_cast<const __nv_bfloat16*>(p.k_nope) +
                             int64_t(tc.k_begin) * p.k_nope_row_stride +
                             int64_t(head) * p.k_nope_head_stride;
  const __nv_bfloat16* gKr = static_cast<const __nv_bfloat16*>(p.k_rope) +
                             int64_t(tc.k_begin) * p.k_rope_row_stride +
                             int64_t(head) * p.k_rope_head_stride;
  const __nv_bfloat16* gV = static_cast<const __nv_bfloat16*>(p.v) +
                            int64_t(tc.k_begin) * p.v_row_stride + int64_t(head) * p.v_head_stride;

  constexpr int kQkChunks = T::kDqk / 8, kNopeChunks = T::kDnope / 8, kVChunks = T::kDv / 8;
  auto load_q = [&]() {
    for (int i = tid; i < T::kBlockM * kQkChunks; i += T::kThreads) {
      const int r = i / kQkChunks, c = i % kQkChunks;
      const bool ok = tc.q0 + r < tc.seq_q;
      cp_async_16(sQ + sw128_offset(r, c, T::kQBlockBytes),
                  gQ + int64_t(ok ? tc.q0 + r : 0) * p.q_row_stride + c * 8, ok);
    }
  };
  auto load_kv = [&](int tile, int stage) {
    const int n0 = tile * T::kBlockN;
    const uint32_t dK = sK + stage * T::kSmemK, dV = sV + stage * T::kSmemV;
    for (int i = tid; i < T::kBlockN * kQkChunks; i += T::kThreads) {
      const int r = i / kQkChunks, c = i % kQkChunks;
      const bool ok = n0 + r < tc.seq_k;
      const int64_t row = ok ? n0 + r : 0;
      const __nv_bfloat16* src = c < kNopeChunks
                                     ? gKn + row * p.k_nope_row_stride + c * 8
                                     : gKr + row * p.k_rope_row_stride + (c - kNopeChunks) * 8;
      cp_async_16(dK + sw128_offset(r, c, T::kKBlockBytes), src, ok);
    }
    for (int i = tid; i < T::kBlockN * kVChunks; i += T::kThreads) {
      const int r = i / kVChunks, c = i % kVChunks;
      const bool ok = n0 + r < tc.seq_k;
      cp_async_16(dV + sw128_offset(r, c, T::kVBlockBytes),
                  gV + int64_t(ok ? n0 + r : 0) * p.v_row_stride + c * 8, ok);
    }
  };

  constexpr int kNT = T::kBlockN / 8, kOT = T::kDv / 8;
  float o[kOT][4];
  zero_acc(o);
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.f, 0.f};
  const float scale_log2 = p.softmax_scale * 1.4426950408889634f;
  const int g = lane / 4, cq = lane % 4;
  const int wg_row0 = tc.q0 + wg * 64;        // first query row of this warpgroup
  const int my_row0 = wg_row0 + wl * 16 + g;  // this thread's first row (second: +8)
  const int lim[2] = {p.causal ? min(tc.seq_k - 1, my_row0 + tc.diag) : tc.seq_k - 1,
                      p.causal ? min(tc.seq_k - 1, my_row0 + 8 + tc.diag) : tc.seq_k - 1};

  if (tc.n_tiles > 0) {
    load_q();
    load_kv(0, 0);
    cp_async_commit();
  }
  for (int j = 0; j < tc.n_tiles; ++j) {
    if (j + 1 < tc.n_tiles) {
      load_kv(j + 1, (j + 1) & 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    wgmma::fence_proxy_async();  // cp.async wrote through the generic proxy; wgmma reads async
    __syncthreads();
    const int n0 = j * T::kBlockN;
    // A warpgroup whose 64 rows see none of this tile's keys skips it.
    const bool wg_active = !p.causal || n0 <= wg_row0 + 63 + tc.diag;
    if (wg_active) {
      const uint32_t tK = sK + (j & 1) * T::kSmemK, tV = sV + (j & 1) * T::kSmemV;
      float s[kNT][4];
#pragma unroll
      for (int i = 0; i < kNT; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
      wgmma::fence();
#pragma unroll
      for (int ks = 0; ks < T::kDqk / 16; ++ks) {
        const uint32_t col = (ks / 4), sub = (ks % 4) * 32;  // 64-col block, 16-col step in it
        const uint64_t da =
            wgmma::desc_sw128(sQ + col * T::kQBlockBytes + wg * 64 * 128 + sub, 16, 1024);
        const uint64_t db = wgmma::desc_sw128(tK + col * T::kKBlockBytes + sub, 16, 1024);
        wgmma::m64n64k16_ss(s, da, db, true);
      }
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::fence_regs(s);
      const bool need_mask =
          n0 + T::kBlockN > tc.seq_k || (p.causal && n0 + T::kBlockN - 1 > wg_row0 + tc.diag);
      if (need_mask) mask_scores(s, n0, cq, lim);
      uint32_t pf[kNT / 2][4];
      online_softmax(s, row_max, row_sum, o, scale_log2, pf);
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < T::kBlockN / 16; ++kk) {
        // 16 keys = two 8-row groups (2 KB) further; lbo: next 64-dim block.
        const uint64_t db = wgmma::desc_sw128(tV + kk * 16 * 128, T::kVBlockBytes, 1024);
        wgmma::m64n128k16_rs_tb(o, pf[kk], db, true);
      }
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::fence_regs(o);
    }
    __syncthreads();  // the stage just read is the one the next iteration refills
  }
  write_rows<kOutF32>(p, o, row_max, row_sum, my_row0, tc.seq_q, tc.q_begin, head, cq);
}

}  // namespace mla::cuda::prefill
