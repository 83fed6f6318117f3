// Causal flash-attention forward for non-absorbed MLA prefill (FA2 scheme on
// warp-level tensor cores): d_qk 192, d_v 128, bf16 in, f32 accumulation,
// bf16 or f32 out + f32 log-sum-exp. One CTA = 128 queries of one (sequence,
// head); 8 warps own 16 query rows each; keys stream in 64-key tiles through a
// two-stage cp.async pipeline; online softmax in registers.
#pragma once
#include <cuda_bf16.h>

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "cuda/prefill/flash_fwd_params.hpp"
#include "cuda/prefill/flash_softmax.cuh"
#include "cuda/prefill/mma_sm80.cuh"

namespace mla::cuda::prefill {

struct FlashFwdTraits {
  static constexpr int kBlockM = 128;  // queries per CTA
  static constexpr int kBlockN = 64;   // keys per pipeline stage
  static constexpr int kWarps = 8;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kDnope = 128, kDrope = 64, kDqk = kDnope + kDrope, kDv = 128;
  static constexpr int kChunkElems = 8;                     // one 16-byte chunk of bf16
  static constexpr int kQkChunks = kDqk / kChunkElems;      // 24 per row
  static constexpr int kNopeChunks = kDnope / kChunkElems;  // 16
  static constexpr int kVChunks = kDv / kChunkElems;        // 16
  static constexpr int kStages = 2;
  static constexpr int kSmemQ = kBlockM * kDqk * 2;
  static constexpr int kSmemK = kBlockN * kDqk * 2;
  static constexpr int kSmemV = kBlockN * kDv * 2;
  static constexpr int kSmemBytes = kSmemQ + kStages * (kSmemK + kSmemV);
  static constexpr int kNTiles = kBlockN / 8;    // n8 MMA tiles of S per warp
  static constexpr int kOTiles = kDv / 8;        // n8 MMA tiles of O per warp
  static constexpr int kQkSteps = kDqk / 16;     // k16 steps of Q.K^T
  static constexpr int kPvSteps = kBlockN / 16;  // k16 steps of P.V

  static_assert(kBlockM == kWarps * 16, "each warp owns one m16 tile of query rows");
  static_assert(kQkChunks % 8 == 0 && kVChunks % 8 == 0,
                "the XOR swizzle permutes chunks within groups of 8: rows must be whole groups");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per CTA on Hopper is 227 KB");
};

// Shared tiles are rows of 16-byte chunks; chunk c of row r is stored at chunk
// c ^ (r & 7). The 8 rows one ldmatrix reads (same logical chunk) then fall in 8
// different bank groups: row strides of 384 and 256 bytes are multiples of 128,
// which without the swizzle would put all 8 in the same banks.
template <int kChunksPerRow>
__device__ __forceinline__ int swz(int row, int chunk) {
  return row * kChunksPerRow * 8 + ((chunk ^ (row & 7)) * 8);
}

template <bool kOutF32>
__global__ void __launch_bounds__(FlashFwdTraits::kThreads, 1)
    flash_fwd_kernel(const FlashFwdParams p) {
  using T = FlashFwdTraits;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __nv_bfloat16* sQ = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* sK = sQ + T::kBlockM * T::kDqk;               // kStages tiles
  __nv_bfloat16* sV = sK + T::kStages * T::kBlockN * T::kDqk;  // kStages tiles

  const TileCoords tc = tile_coords<T::kBlockM, T::kBlockN>(p);
  if (!tc.valid) return;
  const int head = blockIdx.y;
  const int q_begin = tc.q_begin, seq_q = tc.seq_q, k_begin = tc.k_begin, seq_k = tc.seq_k;
  const int q0 = tc.q0, diag = tc.diag, n_tiles = tc.n_tiles;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

  const __nv_bfloat16* gQ = static_cast<const __nv_bfloat16*>(p.q) +
                            int64_t(q_begin) * p.q_row_stride + int64_t(head) * p.q_head_stride;
  const __nv_bfloat16* gKn = static_cast<const __nv_bfloat16*>(p.k_nope) +
                             int64_t(k_begin) * p.k_nope_row_stride +
                             int64_t(head) * p.k_nope_head_stride;
  const __nv_bfloat16* gKr = static_cast<const __nv_bfloat16*>(p.k_rope) +
                             int64_t(k_begin) * p.k_rope_row_stride +
                             int64_t(head) * p.k_rope_head_stride;
  const __nv_bfloat16* gV = static_cast<const __nv_bfloat16*>(p.v) +
                            int64_t(k_begin) * p.v_row_stride + int64_t(head) * p.v_head_stride;

  // ---- async tile loads (rows past the sequence are zero-filled) ----
  auto load_q = [&]() {
    for (int i = tid; i < T::kBlockM * T::kQkChunks; i += T::kThreads) {
      const int r = i / T::kQkChunks, c = i % T::kQkChunks;
      const bool ok = q0 + r < seq_q;
      const __nv_bfloat16* src = gQ + int64_t(ok ? q0 + r : 0) * p.q_row_stride + c * 8;
      cp_async_16(smem_addr(sQ + swz<T::kQkChunks>(r, c)), src, ok);
    }
  };
  auto load_kv = [&](int tile, int stage) {
    const int n0 = tile * T::kBlockN;
    __nv_bfloat16* dK = sK + stage * T::kBlockN * T::kDqk;
    __nv_bfloat16* dV = sV + stage * T::kBlockN * T::kDv;
    for (int i = tid; i < T::kBlockN * T::kQkChunks; i += T::kThreads) {
      const int r = i / T::kQkChunks, c = i % T::kQkChunks;
      const bool ok = n0 + r < seq_k;
      const int64_t row = ok ? n0 + r : 0;
      const __nv_bfloat16* src = c < T::kNopeChunks
                                     ? gKn + row * p.k_nope_row_stride + c * 8
                                     : gKr + row * p.k_rope_row_stride + (c - T::kNopeChunks) * 8;
      cp_async_16(smem_addr(dK + swz<T::kQkChunks>(r, c)), src, ok);
    }
    for (int i = tid; i < T::kBlockN * T::kVChunks; i += T::kThreads) {
      const int r = i / T::kVChunks, c = i % T::kVChunks;
      const bool ok = n0 + r < seq_k;
      const int64_t row = ok ? n0 + r : 0;
      cp_async_16(smem_addr(dV + swz<T::kVChunks>(r, c)), gV + row * p.v_row_stride + c * 8, ok);
    }
  };

  // Per-thread state: rows g and g + 8 of the warp's 16 (g = lane / 4).
  float o[T::kOTiles][4];
#pragma unroll
  for (int i = 0; i < T::kOTiles; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.f, 0.f};  // this thread's partial; the quad reduces at the end
  const float scale_log2 = p.softmax_scale * 1.4426950408889634f;
  const int g = lane / 4, cq = lane % 4;
  const int warp_row0 = q0 + warp * 16;  // first query row of this warp
  const int lim[2] = {p.causal ? min(seq_k - 1, warp_row0 + g + diag) : seq_k - 1,
                      p.causal ? min(seq_k - 1, warp_row0 + g + 8 + diag) : seq_k - 1};

  uint32_t qf[T::kQkSteps][4];
  if (n_tiles > 0) {
    load_q();
    load_kv(0, 0);
    cp_async_commit();
  }
  for (int j = 0; j < n_tiles; ++j) {
    if (j + 1 < n_tiles) {
      load_kv(j + 1, (j + 1) & 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (j == 0) {
#pragma unroll
      for (int ks = 0; ks < T::kQkSteps; ++ks)
        ldmatrix_x4(qf[ks], sQ + swz<T::kQkChunks>(warp * 16 + (lane % 16), ks * 2 + lane / 16));
    }
    const int n0 = j * T::kBlockN;
    // A warp whose 16 rows see none of this tile's keys skips it (causal diagonal).
    const bool warp_active = !p.causal || n0 <= warp_row0 + 15 + diag;
    if (warp_active) {
      const __nv_bfloat16* tK = sK + (j & 1) * T::kBlockN * T::kDqk;
      const __nv_bfloat16* tV = sV + (j & 1) * T::kBlockN * T::kDv;
      float s[T::kNTiles][4];
#pragma unroll
      for (int i = 0; i < T::kNTiles; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
      for (int ks = 0; ks < T::kQkSteps; ++ks) {
#pragma unroll
        for (int np = 0; np < T::kNTiles / 2; ++np) {
          uint32_t kf[4];
          ldmatrix_x4(kf, tK + swz<T::kQkChunks>(np * 16 + (lane % 8) + (lane / 16) * 8,
                                                 ks * 2 + (lane / 8) % 2));
          mma_bf16_16816(s[2 * np], qf[ks], kf[0], kf[1]);
          mma_bf16_16816(s[2 * np + 1], qf[ks], kf[2], kf[3]);
        }
      }
      // Mask: keys past the sequence, and (causal) keys past each row's limit.
      const bool need_mask =
          n0 + T::kBlockN > seq_k || (p.causal && n0 + T::kBlockN - 1 > warp_row0 + diag);
      if (need_mask) mask_scores(s, n0, cq, lim);
      uint32_t pf[T::kPvSteps][4];
      online_softmax(s, row_max, row_sum, o, scale_log2, pf);
#pragma unroll
      for (int kk = 0; kk < T::kPvSteps; ++kk) {
#pragma unroll
        for (int dp = 0; dp < T::kOTiles / 2; ++dp) {
          uint32_t vf[4];
          ldmatrix_x4_trans(vf, tV + swz<T::kVChunks>(kk * 16 + (lane % 16), dp * 2 + lane / 16));
          mma_bf16_16816(o[2 * dp], pf[kk], vf[0], vf[1]);
          mma_bf16_16816(o[2 * dp + 1], pf[kk], vf[2], vf[3]);
        }
      }
    }
    __syncthreads();  // the stage just read is the one the next iteration refills
  }

  write_rows<kOutF32>(p, o, row_max, row_sum, warp_row0 + g, seq_q, q_begin, head, cq);
}

}  // namespace mla::cuda::prefill
