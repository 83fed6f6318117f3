// The mma_sync sparse attention kernel (MQA, d_qk 576, d_v 512) over
// per-query index lists: FlashAttention-2 style on mma.sync m16n8k16 bf16
// tensor cores. It runs where the decode kernel cannot (sparse_cuda.hpp,
// choose_kernel); instantiations in sparse_mma_bf16.cu / sparse_mma_fp8.cu.
//
// A CTA owns one query row (b, i), a block of HB heads (16/32/64) and a range of
// the row's index list, and streams the listed keys in tiles of NK. The tile
// loader is the only part that knows the cache format:
//   bf16  cp.async of the 1152-byte entries straight into the key tile;
//   fp8   cp.async of the 656-byte entries into a staging buffer, then a
//         dequantising pass (e4m3 x power-of-two scale is exact in bf16) into
//         the same bf16 key tile.
// The attention core after it is format-blind. Invalid list entries (-1, past
// topk_length, outside the cache) are never read: their copy is zero-filled
// and their score masked to -inf.
//
// Warp layout (8 warps): warp w takes heads 16*(w % MT) .. +15 (MT = HB/16) and
// is the j-th (j = w / MT) of the WPM = 8/MT warps sharing those heads. S = Q K^T
// is split by keys among them (KW = NK/WPM keys each), the row max is exchanged
// through shared memory, P goes to shared memory as bf16, and O += P V is split
// by value columns (DVW = 512/WPM each), so no MMA is done twice.
#pragma once
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "cuda/common/cuda_status.hpp"
#include "cuda/common/fp8.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/sparse/sparse_mma_config.hpp"
#include "cuda/sparse/sparse_params.hpp"

namespace mla::cuda::sparse::mma {

// cp.async without the "memory" clobber: the kernel orders its copies
// by the __syncthreads after each cp_async_wait.
using ptx::ldmatrix_x4;
using ptx::ldmatrix_x4_trans;
using ptx::mma_bf16_16816;
using ptx::pack_bf16x2;
using ptx::noclobber::cp_async_16;
using ptx::noclobber::cp_async_commit;
using ptx::noclobber::cp_async_wait;

// Slots are i32, so 32-bit arithmetic; power-of-two pages (every engine's
// choice) by shift and mask instead of a division per 16-byte piece.
__device__ __forceinline__ const uint8_t* entry_ptr(const SparseAttnParams& p, int page_shift,
                                                    int64_t slot) {
  const uint32_t s = uint32_t(slot);
  uint32_t page, off;
  if (page_shift >= 0) {
    page = s >> page_shift, off = s & ((1u << page_shift) - 1u);
  } else {
    page = s / uint32_t(p.page_size), off = s - page * uint32_t(p.page_size);
  }
  return p.kv + int64_t(page) * p.page_stride + int64_t(off) * p.token_stride;
}

template <int HB, bool kFp8>
__global__ void __launch_bounds__(kThreads, 1)
    sparse_mma_kernel(SparseAttnParams p, int tiles_per_split, float* part_o, float* part_lse) {
  using Tr = Traits<HB, kFp8>;
  constexpr int NK = Tr::kNK, KW = Tr::kKW, DVW = Tr::kDVW, WPM = Tr::kWPM, S = Tr::kStages;
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* sQ = smem + Tr::kOffQ;
  uint8_t* sP = smem + Tr::kOffP;
  float* sMax = reinterpret_cast<float*>(smem + Tr::kOffMax);
  float* sSum = reinterpret_cast<float*>(smem + Tr::kOffSum);
  int* sOk = reinterpret_cast<int*>(smem + Tr::kOffOk);

  const int head0 = blockIdx.x * HB;
  const int row = blockIdx.y;  // b * s_q + i
  const int b = row / p.s_q, qi = row % p.s_q;
  const int split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int mt = warp % Tr::kMT, j = warp / Tr::kMT;

  const int32_t* idx = p.indices + b * p.idx_sb + qi * p.idx_ss;
  const int page_shift = (p.page_size & (p.page_size - 1)) == 0 && p.page_size <= (int64_t(1) << 31)
                             ? __ffsll(p.page_size) - 1
                             : (p.page_size > 0xffffffffLL ? 31 : -1);
  int n_keys = p.topk;
  if (p.topk_length) n_keys = min(n_keys, max(0, p.topk_length[b]));
  const int tiles_total = (n_keys + NK - 1) / NK;
  const int tile_begin = split * tiles_per_split;
  const int tile_end = min(tiles_total, tile_begin + tiles_per_split);
  const int num_tiles = max(0, tile_end - tile_begin);

  // ---- Q [HB x 576] into shared memory (first cp.async group) ----
  {
    const __nv_bfloat16* q = static_cast<const __nv_bfloat16*>(p.q) + b * p.q_sb + qi * p.q_ss;
    for (int c = threadIdx.x; c < HB * (kDqk / 8); c += kThreads) {
      const int h = c / (kDqk / 8), part = c % (kDqk / 8);
      cp_async_16(sQ + h * kRowBytes + part * 16, q + int64_t(head0 + h) * p.q_sh + part * 8, true);
    }
  }

  // ---- the tile loader: the only format-specific part ----
  auto issue_tile = [&](int it) {
    if (it < num_tiles) {
      const int st = it % S;
      uint8_t* dst = smem + Tr::kOffStages + st * Tr::kStageBytes;
      const int key0 = (tile_begin + it) * NK;
      constexpr int kChunks = kFp8 ? kFp8Entry / 16 : kDqk * 2 / 16;  // 41 or 72 per key
      for (int c = threadIdx.x; c < NK * kChunks; c += kThreads) {
        const int key = c / kChunks, part = c % kChunks;
        const int pos = key0 + key;
        const int64_t slot = pos < n_keys ? idx[pos] : -1;
        const bool ok = slot >= 0 && slot < p.num_slots;
        const uint8_t* src =
            ok ? entry_ptr(p, page_shift, slot) + part * 16 : sQ;  // not read when !ok
        uint8_t* d = kFp8 ? dst + key * kFp8Entry + part * 16 : dst + key * kRowBytes + part * 16;
        cp_async_16(d, src, ok);
        if (part == 0) sOk[st * NK + key] = ok;
      }
    }
    cp_async_commit();
  };
  // fp8: staging -> bf16 tile. Each thread converts 16-byte pieces: 32 pieces of
  // 16 codes (one scale each) and 8 pieces of rope per key.
  auto finish_tile = [&](int it) -> const uint8_t* {
    const int st = it % S;
    const uint8_t* raw = smem + Tr::kOffStages + st * Tr::kStageBytes;
    if constexpr (!kFp8) {
      return raw;
    } else {
      uint8_t* tile = smem + Tr::kOffTile;
      for (int c = threadIdx.x; c < NK * 40; c += kThreads) {
        const int key = c / 40, part = c % 40;
        const uint8_t* e = raw + key * kFp8Entry;
        uint8_t* d = tile + key * kRowBytes;
        if (part < 32) {
          const uint4 codes = *reinterpret_cast<const uint4*>(e + part * 16);
          const float sc =
              reinterpret_cast<const float*>(e + Fp8DsMlaLayout::kScaleOffset)[part / 8];
          const uint32_t w[4] = {codes.x, codes.y, codes.z, codes.w};
          uint32_t o[8];
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const float2 lo = e4m3x2_to_float2(static_cast<uint16_t>(w[i] & 0xffff));
            const float2 hi = e4m3x2_to_float2(static_cast<uint16_t>(w[i] >> 16));
            o[2 * i] = pack_bf16x2(lo.x * sc, lo.y * sc);
            o[2 * i + 1] = pack_bf16x2(hi.x * sc, hi.y * sc);
          }
          reinterpret_cast<uint4*>(d + part * 32)[0] = make_uint4(o[0], o[1], o[2], o[3]);
          reinterpret_cast<uint4*>(d + part * 32)[1] = make_uint4(o[4], o[5], o[6], o[7]);
        } else {
          *reinterpret_cast<uint4*>(d + 1024 + (part - 32) * 16) =
              *reinterpret_cast<const uint4*>(e + Fp8DsMlaLayout::kRopeOffset + (part - 32) * 16);
        }
      }
      __syncthreads();
      return tile;
    }
  };

  // ---- running softmax state and the output accumulators ----
  constexpr int kONt = DVW / 8;
  float o[kONt][4];
#pragma unroll
  for (int n = 0; n < kONt; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY};  // rows g, g + 8 (log2 domain)
  float l_run[2] = {0.f, 0.f};              // this warp's keys only
  const float sl2 = p.softmax_scale * kLog2e;
  const int hrow = mt * 16;  // first head row of this warp in the block

  ptx::noclobber::pipeline_prime<S>(issue_tile);
  for (int it = 0; it < num_tiles; ++it) {
    ptx::noclobber::pipeline_step<S>(it, issue_tile);
    const uint8_t* sK = finish_tile(it);
    const int* ok = sOk + (it % S) * NK;

    // S = Q K^T for keys [j*KW, j*KW + KW) of the tile
    constexpr int kSNt = KW / 8;
    float sc[kSNt][4];
#pragma unroll
    for (int n = 0; n < kSNt; ++n) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.f;
    const uint8_t* qa =
        sQ + (hrow + (lane & 7) + ((lane >> 3) & 1) * 8) * kRowBytes + (lane >> 4) * 16;
    if constexpr (KW == 16) {
      const uint8_t* kb =
          sK + (j * KW + ((lane >> 4) & 1) * 8 + (lane & 7)) * kRowBytes + ((lane >> 3) & 1) * 16;
#pragma unroll 4
      for (int ks = 0; ks < kDqk / 16; ++ks) {
        uint32_t a[4], bb[4];
        ldmatrix_x4(a, qa + ks * 32);
        ldmatrix_x4(bb, kb + ks * 32);
        mma_bf16_16816(sc[0], a, bb[0], bb[1]);
        mma_bf16_16816(sc[1], a, bb[2], bb[3]);
      }
    } else {
      const uint8_t* kb = sK + (j * KW + (lane & 7)) * kRowBytes + (lane >> 3) * 16;
#pragma unroll 4
      for (int ks = 0; ks < kDqk / 16; ks += 2) {
        uint32_t a0[4], a1[4], bb[4];
        ldmatrix_x4(a0, qa + ks * 32);
        ldmatrix_x4(a1, qa + ks * 32 + 32);
        ldmatrix_x4(bb, kb + ks * 32);
        mma_bf16_16816(sc[0], a0, bb[0], bb[1]);
        mma_bf16_16816(sc[0], a1, bb[2], bb[3]);
      }
    }
    // scale to the log2 domain and mask invalid keys; this warp's row maxima
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < kSNt; ++n) {
      const int c = j * KW + n * 8 + 2 * t;
      const bool v0 = ok[c], v1 = ok[c + 1];
      sc[n][0] = v0 ? sc[n][0] * sl2 : -INFINITY;
      sc[n][1] = v1 ? sc[n][1] * sl2 : -INFINITY;
      sc[n][2] = v0 ? sc[n][2] * sl2 : -INFINITY;
      sc[n][3] = v1 ? sc[n][3] * sl2 : -INFINITY;
      mx[0] = fmaxf(mx[0], fmaxf(sc[n][0], sc[n][1]));
      mx[1] = fmaxf(mx[1], fmaxf(sc[n][2], sc[n][3]));
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    }
    if (t == 0) sMax[j * HB + hrow + g] = mx[0], sMax[j * HB + hrow + g + 8] = mx[1];
    __syncthreads();
    float alpha[2], m_ref[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float m_new = m_run[r];
#pragma unroll
      for (int q = 0; q < WPM; ++q) m_new = fmaxf(m_new, sMax[q * HB + hrow + g + r * 8]);
      m_ref[r] = m_new == -INFINITY ? 0.f : m_new;  // no valid key yet: exp2(-inf - 0) = 0
      alpha[r] = exp2f(m_run[r] - m_ref[r]);
      m_run[r] = m_new;
    }
    // P = exp2(S - m) as bf16 into shared memory; this warp's row sums
    float rs[2] = {0.f, 0.f};
#pragma unroll
    for (int n = 0; n < kSNt; ++n) {
      const float p0 = exp2f(sc[n][0] - m_ref[0]), p1 = exp2f(sc[n][1] - m_ref[0]);
      const float p2 = exp2f(sc[n][2] - m_ref[1]), p3 = exp2f(sc[n][3] - m_ref[1]);
      rs[0] += p0 + p1;
      rs[1] += p2 + p3;
      const int c = j * KW + n * 8 + 2 * t;
      *reinterpret_cast<uint32_t*>(sP + (hrow + g) * Tr::kPRow + c * 2) = pack_bf16x2(p0, p1);
      *reinterpret_cast<uint32_t*>(sP + (hrow + g + 8) * Tr::kPRow + c * 2) = pack_bf16x2(p2, p3);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      rs[r] += __shfl_xor_sync(0xffffffffu, rs[r], 1);
      rs[r] += __shfl_xor_sync(0xffffffffu, rs[r], 2);
      l_run[r] = l_run[r] * alpha[r] + rs[r];
    }
#pragma unroll
    for (int n = 0; n < kONt; ++n) {
      o[n][0] *= alpha[0], o[n][1] *= alpha[0];
      o[n][2] *= alpha[1], o[n][3] *= alpha[1];
    }
    __syncthreads();  // P complete
    // O[:, j*DVW .. +DVW] += P V
    const uint8_t* pa =
        sP + (hrow + (lane & 7) + ((lane >> 3) & 1) * 8) * Tr::kPRow + (lane >> 4) * 16;
    const uint8_t* vb =
        sK + (((lane >> 3) & 1) * 8 + (lane & 7)) * kRowBytes + (j * DVW + (lane >> 4) * 8) * 2;
#pragma unroll
    for (int kk = 0; kk < NK / 16; ++kk) {
      uint32_t a[4];
      ldmatrix_x4(a, pa + kk * 32);
#pragma unroll
      for (int np = 0; np < kONt / 2; ++np) {
        uint32_t bb[4];
        ldmatrix_x4_trans(bb, vb + kk * 16 * kRowBytes + np * 32);
        mma_bf16_16816(o[2 * np], a, bb[0], bb[1]);
        mma_bf16_16816(o[2 * np + 1], a, bb[2], bb[3]);
      }
    }
  }
  cp_async_wait<0>();

  // ---- finish: total row sums across the WPM warps, normalise, write ----
  if (t == 0) sSum[j * HB + hrow + g] = l_run[0], sSum[j * HB + hrow + g + 8] = l_run[1];
  __syncthreads();
  float l_tot[2] = {0.f, 0.f};
#pragma unroll
  for (int r = 0; r < 2; ++r)
    for (int q = 0; q < WPM; ++q) l_tot[r] += sSum[q * HB + hrow + g + r * 8];

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int h = head0 + hrow + g + r * 8;
    const bool empty = l_tot[r] == 0.f;
    const float inv = empty ? 0.f : 1.f / l_tot[r];
    const float lse = empty ? -INFINITY : (m_run[r] + log2f(l_tot[r])) / kLog2e;
    if (part_o == nullptr) {
      __nv_bfloat16* out =
          static_cast<__nv_bfloat16*>(p.out) + b * p.out_sb + qi * p.out_ss + int64_t(h) * p.out_sh;
#pragma unroll
      for (int n = 0; n < kONt; ++n)
        *reinterpret_cast<uint32_t*>(out + j * DVW + n * 8 + 2 * t) =
            pack_bf16x2(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
      if (t == 0 && j == 0) p.lse[b * p.lse_sb + int64_t(h) * p.lse_sh + qi * p.lse_ss] = lse;
    } else {
      const int64_t prow = (int64_t(split) * gridDim.y + row) * p.h_q + h;
      float* out = part_o + prow * kDv;
#pragma unroll
      for (int n = 0; n < kONt; ++n)
        *reinterpret_cast<float2*>(out + j * DVW + n * 8 + 2 * t) =
            make_float2(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
      if (t == 0 && j == 0) part_lse[prow] = lse;
    }
  }
}

// Merge the splits of each (row, head) by log-sum-exp: one warp per (row, head).

// One launch of one instantiation: grid (h_q / HB, batch * s_q, splits).
template <int HB, bool kFp8>
Status launch_kernel(const SparseAttnParams& p, int splits, float* part_o, float* part_lse,
                     cudaStream_t stream) {
  using Tr = Traits<HB, kFp8>;
  auto kernel = sparse_mma_kernel<HB, kFp8>;
  static bool attr_set = false;
  if (!attr_set) {
    MLA_TRY(cuda_status(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmem),
        "cudaFuncSetAttribute(sparse_mma_kernel)"));
    attr_set = true;
  }
  const int tiles = (p.topk + Tr::kNK - 1) / Tr::kNK;
  const int per_split = (tiles + splits - 1) / splits;
  const dim3 grid{unsigned(p.h_q / HB), unsigned(p.batch * p.s_q), unsigned(splits)};
  kernel<<<grid, kThreads, Tr::kSmem, stream>>>(p, per_split, part_o, part_lse);
  return check_launch("sparse_mma_kernel");
}

}  // namespace mla::cuda::sparse::mma
