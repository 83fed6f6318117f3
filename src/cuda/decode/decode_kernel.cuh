// The main split-KV decode kernel: a persistent CTA runs its worker's pieces
// (decode_schedule.cu); per piece it loads M query rows, streams the piece's
// key tiles through shared memory, and keeps an online softmax.
//
// Per tile of 64 keys, 8 warps:
//   S = Q K^T    warp (rt, kg) computes rows rt*16..+16 x keys kg*KW..+KW over
//                all 576 dims (mma.sync m16n8k16, A and B by ldmatrix);
//   softmax      row maxima of the kG key groups meet in shared memory; each
//                warp scales its own scores, P goes to shared memory as bf16;
//   O += P V     warp w owns output columns w*64..+64 for all M rows, so the
//                fp32 accumulators (2*M per thread) stay in registers.
// bf16 cache: two K/V tile buffers filled by cp.async (tile i+1 loads while
// tile i computes). fp8 cache: raw 656-byte-entry buffers in flight (two at
// 16/32 rows, one at 64: no room for more next to Q) and one bf16 buffer the
// raw tile is dequantised into.
//
// Device-side inputs cannot be checked before the launch (no host sync), so the
// kernel guards them: a page id outside [0, num_pages) is never dereferenced
// (its keys read as zeros) and the request's rows come out NaN (out and lse);
// a length outside [0, capacity] gives NaN rows too (scheduler, kSlotBadRequest).
#pragma once
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "cuda/common/fp8.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/decode/decode_launch.hpp"

namespace mla::cuda::decode {

template <int kRowTiles, bool kFp8>
struct MainShape {
  static_assert(kRowTiles == 1 || kRowTiles == 2 || kRowTiles == 4,
                "a CTA holds 16, 32 or 64 query rows");
  static constexpr int M = 16 * kRowTiles;
  static constexpr int kKeyGroups = kWarps / kRowTiles;        // warps sharing a row tile in S
  static constexpr int kKeysPerWarp = kTileKeys / kKeyGroups;  // 32, 16 or 8
  static constexpr int kSNTiles = kKeysPerWarp / 8;            // n8 tiles of S per warp
  static constexpr int kVColsPerWarp = kDv / kWarps;           // 64
  static constexpr int kVNTiles = kVColsPerWarp / 8;           // 8
  static_assert(kKeysPerWarp % 8 == 0, "each warp's S slice is whole n8 tiles");
  static_assert(kSNTiles == 1 || kSNTiles % 2 == 0, "B fragments load in pairs (x4) or one (x2)");
  static_assert(kVNTiles % 2 == 0, "V fragments load in pairs (ldmatrix.x4.trans)");

  static constexpr int kRowBytes = kChunksPerRow * 16;  // 1152: one swizzled 576-wide bf16 row
  static constexpr int kKvBuffers = kFp8 ? 1 : 2;
  // fp8: raw tiles in flight. Two where they fit next to Q (16/32 rows): the
  // memory-bound shapes need two loads in flight; at 64 rows only one fits.
  static constexpr int kRawStages = kFp8 ? (kRowTiles <= 2 ? 2 : 1) : 0;
  static constexpr size_t kQOff = 0;
  static constexpr size_t kKvOff = kQOff + size_t(M) * kRowBytes;
  static constexpr size_t kRawOff = kKvOff + size_t(kKvBuffers) * kTileKeys * kRowBytes;
  static constexpr size_t kPOff = kRawOff + size_t(kRawStages) * kTileKeys * kFp8EntryBytes;
  static constexpr size_t kRedMaxOff = kPOff + size_t(M) * kTileKeys * 2;
  static constexpr size_t kRedSumOff = kRedMaxOff + size_t(kKeyGroups) * M * 4;
  static constexpr size_t kAlphaOff = kRedSumOff + size_t(kKeyGroups) * M * 4;
  static constexpr size_t kMOff = kAlphaOff + size_t(M) * 4;
  static constexpr size_t kBadOff = kMOff + size_t(M) * 4;
  static constexpr size_t kSmemBytes = kBadOff + 16;
  static_assert(kSmemBytes <= 227 * 1024, "one CTA must fit the 227 KB a Hopper block may use");
};

// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled tile whose
// rows are `row_bytes` long: the chunk index is XORed with row % 8, so the 8
// row addresses of one ldmatrix hit 8 different bank groups.
__device__ __forceinline__ int swz(int row, int chunk, int row_bytes) {
  return row * row_bytes + ((chunk ^ (row & 7)) << 4);
}

// Entry address of key `key` of request b, or nullptr when the block table
// names a page outside [0, num_pages).
__device__ __forceinline__ const uint8_t* entry_ptr(const DecodeParams& p, int b, int key) {
  const int page_idx = key / p.page_size;
  const int off = key - page_idx * p.page_size;
  const int page = p.block_table[b * p.bt_stride_b + int64_t(page_idx) * p.bt_stride_p];
  if (page < 0 || page >= p.num_pages) return nullptr;
  return p.kv + int64_t(page) * p.page_stride_bytes + int64_t(off) * p.token_stride_bytes;
}

// Issue the cp.async copies of one tile's entries (`entry_bytes` each): 4
// threads per token, 16 bytes each, so a warp reads 8 tokens x 64 contiguous
// bytes per instruction. Keys at or past key_end are zero-filled.
template <bool kRaw>
__device__ __forceinline__ void load_tile(const DecodeParams& p, uint8_t* dst, int b, int tile,
                                          int key_end, int* bad) {
  constexpr int kChunks = kRaw ? kFp8EntryBytes / 16 : kChunksPerRow;  // 41 or 72
  const int j = threadIdx.x / 4, sub = threadIdx.x % 4;
  const int key = tile * kTileKeys + j;
  bool valid = key < key_end;
  const uint8_t* src = valid ? entry_ptr(p, b, key) : nullptr;
  if (valid && src == nullptr) {
    atomicOr(bad, 1);
    valid = false;
  }
  if (!valid) src = p.kv;  // any mapped address: src-size 0 reads nothing
#pragma unroll
  for (int i = 0; i < (kChunks + 3) / 4; ++i) {
    const int chunk = sub + 4 * i;
    if (chunk < kChunks) {
      uint8_t* d =
          kRaw ? dst + j * kFp8EntryBytes + chunk * 16 : dst + swz(j, chunk, kChunksPerRow * 16);
      ptx::cp_async_16(d, src + chunk * 16, valid);
    }
  }
}

// Raw fp8_ds_mla tile -> swizzled bf16 tile: c = e4m3 * scale (exact in bf16:
// 4 significant bits times a power of two), k_rope copied.
// v2 measured this loop as the fp8 bottleneck (a rolled loop: each of the 18
// iterations waited for its own shared loads); the trip count is a
// compile-time constant, so it is unrolled to put several loads in flight.
__device__ __forceinline__ void dequant_tile(const uint8_t* raw, uint8_t* dst) {
  static_assert(kTileKeys * kChunksPerRow % kThreads == 0, "every thread dequantises equal work");
#pragma unroll 6
  for (int k = 0; k < kTileKeys * kChunksPerRow / kThreads; ++k) {
    const int idx = threadIdx.x + k * kThreads;
    const int j = idx / kChunksPerRow, chunk = idx % kChunksPerRow;
    const uint8_t* e = raw + j * kFp8EntryBytes;
    uint4 v;
    if (chunk < kDv / 8) {
      const float s = *reinterpret_cast<const float*>(e + 512 + (chunk / 16) * 4);
      const uint2 codes = *reinterpret_cast<const uint2*>(e + chunk * 8);
      uint32_t w[4];
      const uint32_t c32[2] = {codes.x, codes.y};
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float2 lo = e4m3x2_to_float2(uint16_t(c32[h] & 0xffff));
        const float2 hi = e4m3x2_to_float2(uint16_t(c32[h] >> 16));
        w[2 * h] = ptx::pack_bf16x2(lo.x * s, lo.y * s);
        w[2 * h + 1] = ptx::pack_bf16x2(hi.x * s, hi.y * s);
      }
      v = make_uint4(w[0], w[1], w[2], w[3]);
    } else {
      v = *reinterpret_cast<const uint4*>(e + 528 + (chunk - kDv / 8) * 16);
    }
    *reinterpret_cast<uint4*>(dst + swz(j, chunk, kChunksPerRow * 16)) = v;
  }
}

template <int kRowTiles, bool kFp8>
__global__ void __launch_bounds__(kThreads, 1) decode_main_kernel(const DecodeParams p) {
  using S = MainShape<kRowTiles, kFp8>;
  constexpr int M = S::M;
  constexpr int RB = S::kRowBytes;
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* sQ = smem + S::kQOff;
  uint8_t* sKv = smem + S::kKvOff;
  uint8_t* sRaw = smem + S::kRawOff;
  uint8_t* sP = smem + S::kPOff;
  float* sRedMax = reinterpret_cast<float*>(smem + S::kRedMaxOff);
  float* sRedSum = reinterpret_cast<float*>(smem + S::kRedSumOff);
  float* sAlpha = reinterpret_cast<float*>(smem + S::kAlphaOff);
  float* sM = reinterpret_cast<float*>(smem + S::kMOff);
  int* sBad = reinterpret_cast<int*>(smem + S::kBadOff);

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;
  const int rt = warp % kRowTiles, kg = warp / kRowTiles;  // S-phase role
  const int n0 = kg * S::kKeysPerWarp;
  const int vcol0 = warp * S::kVColsPerWarp;  // PV-phase role
  const int row_block = blockIdx.y;
  const float kNegInf = -INFINITY;

  const int piece_end = p.worker_begin[blockIdx.x + 1];
  for (int pi = p.worker_begin[blockIdx.x]; pi < piece_end; ++pi) {
    const Piece pc = p.pieces[pi];
    const int b = pc.b;
    const bool bad_request = pc.slot == kSlotBadRequest;
    const int len = bad_request ? 0 : p.seqlens[b * p.seqlens_stride];
    const int n_tiles = pc.tile_end - pc.tile_begin;
    const int key_end = min(len, pc.tile_end * kTileKeys);

    __syncthreads();  // the previous piece's epilogue has read shared memory
    if (tid == 0) *sBad = bad_request ? 1 : 0;
    // Q rows of this row block (rows past `rows` are zero).
    for (int idx = tid; idx < M * kChunksPerRow; idx += kThreads) {
      const int r = idx / kChunksPerRow, chunk = idx % kChunksPerRow;
      const int rr = row_block * M + r;
      const bool valid = rr < p.rows;
      const int s = valid ? rr / p.h_q : 0, h = valid ? rr % p.h_q : 0;
      const __nv_bfloat16* src = static_cast<const __nv_bfloat16*>(p.q) + b * p.q_stride_b +
                                 s * p.q_stride_s + h * p.q_stride_h + chunk * 8;
      ptx::cp_async_16(sQ + swz(r, chunk, RB), valid ? src : p.q, valid);
    }
    __syncthreads();  // sBad reset before any load may flag it
    if (n_tiles > 0) load_tile<kFp8>(p, kFp8 ? sRaw : sKv, b, pc.tile_begin, key_end, sBad);
    ptx::cp_async_commit();
    if constexpr (S::kRawStages == 2) {
      if (n_tiles > 1)
        load_tile<true>(p, sRaw + kTileKeys * kFp8EntryBytes, b, pc.tile_begin + 1, key_end, sBad);
      ptx::cp_async_commit();
    }

    // Key limit of this thread's two S rows (causal among the s_q new tokens).
    int lim[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int rr = row_block * M + rt * 16 + g + 8 * h;
      if (rr >= p.rows) {
        lim[h] = INT32_MIN;
      } else {
        const int s = rr / p.h_q;
        lim[h] = min(p.causal ? len - (p.s_q - 1 - s) : len, key_end);
      }
    }

    float m_run[2] = {kNegInf, kNegInf}, l_run[2] = {0.f, 0.f};
    float o[kRowTiles][S::kVNTiles][4];
#pragma unroll
    for (int a = 0; a < kRowTiles; ++a)
#pragma unroll
      for (int n = 0; n < S::kVNTiles; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[a][n][e] = 0.f;

    for (int it = 0; it < n_tiles; ++it) {
      const int tile = pc.tile_begin + it;
      const uint8_t* sK;
      if constexpr (kFp8) {
        constexpr int kR = S::kRawStages;
        ptx::cp_async_wait<kR - 1>();
        __syncthreads();  // raw tile `it` landed; the previous tile's compute is done
        uint8_t* raw = sRaw + (it % kR) * kTileKeys * kFp8EntryBytes;
        dequant_tile(raw, sKv);
        __syncthreads();
        if (it + kR < n_tiles) load_tile<true>(p, raw, b, tile + kR, key_end, sBad);
        ptx::cp_async_commit();
        sK = sKv;
      } else {
        if (it + 1 < n_tiles)
          load_tile<false>(p, sKv + ((it + 1) & 1) * kTileKeys * RB, b, tile + 1, key_end, sBad);
        ptx::cp_async_commit();
        ptx::cp_async_wait<1>();
        __syncthreads();  // tile `it` landed for every thread
        sK = sKv + (it & 1) * kTileKeys * RB;
      }

      // ---- S = Q K^T for rows rt*16..+16, keys n0..n0+KW ----
      float sacc[S::kSNTiles][4];
#pragma unroll
      for (int j = 0; j < S::kSNTiles; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) sacc[j][e] = 0.f;
      const int qrow = rt * 16 + lane % 16;
#pragma unroll 4
      for (int kk = 0; kk < kDqk / 16; ++kk) {
        uint32_t a[4];
        ptx::ldmatrix_x4(a, sQ + swz(qrow, 2 * kk + lane / 16, RB));
        const int ch = 2 * kk + ((lane / 8) & 1);
        if constexpr (S::kSNTiles >= 2) {
#pragma unroll
          for (int j = 0; j < S::kSNTiles / 2; ++j) {
            const int key = n0 + j * 16 + (lane / 16) * 8 + lane % 8;
            uint32_t bf[4];
            ptx::ldmatrix_x4(bf, sK + swz(key, ch, RB));
            ptx::mma_bf16_16816(sacc[2 * j], a, bf[0], bf[1]);
            ptx::mma_bf16_16816(sacc[2 * j + 1], a, bf[2], bf[3]);
          }
        } else {
          const int key = n0 + lane % 8;
          uint32_t bf[2];
          ptx::ldmatrix_x2(bf, sK + swz(key, ch, RB));
          ptx::mma_bf16_16816(sacc[0], a, bf[0], bf[1]);
        }
      }

      // ---- online softmax (log2 domain) ----
      float mx[2] = {kNegInf, kNegInf};
#pragma unroll
      for (int j = 0; j < S::kSNTiles; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int h = e / 2;
          const int key = tile * kTileKeys + n0 + j * 8 + 2 * t + (e & 1);
          const float s = key < lim[h] ? sacc[j][e] * p.scale_log2 : kNegInf;
          sacc[j][e] = s;
          mx[h] = fmaxf(mx[h], s);
        }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
        if (t == 0) sRedMax[kg * M + rt * 16 + g + 8 * h] = mx[h];
      }
      __syncthreads();
      float alpha[2], m_use[2], rsum[2] = {0.f, 0.f};
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int lr = rt * 16 + g + 8 * h;
        float tmax = kNegInf;
#pragma unroll
        for (int k = 0; k < S::kKeyGroups; ++k) tmax = fmaxf(tmax, sRedMax[k * M + lr]);
        const float m_new = fmaxf(m_run[h], tmax);
        m_use[h] = m_new == kNegInf ? 0.f : m_new;  // all masked so far: avoid -inf - -inf
        alpha[h] = ptx::fast_exp2(m_run[h] - m_use[h]);
        m_run[h] = m_new;
      }
#pragma unroll
      for (int j = 0; j < S::kSNTiles; ++j) {
        float pv[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          pv[e] = ptx::fast_exp2(sacc[j][e] - m_use[e / 2]);
          rsum[e / 2] += pv[e];
        }
        const int col = n0 + j * 8 + 2 * t;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int lr = rt * 16 + g + 8 * h;
          *reinterpret_cast<uint32_t*>(sP + swz(lr, col / 8, kTileKeys * 2) + (col % 8) * 2) =
              ptx::pack_bf16x2(pv[2 * h], pv[2 * h + 1]);
        }
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        rsum[h] += __shfl_xor_sync(0xffffffffu, rsum[h], 1);
        rsum[h] += __shfl_xor_sync(0xffffffffu, rsum[h], 2);
        l_run[h] = l_run[h] * alpha[h] + rsum[h];
        if (kg == 0 && t == 0) sAlpha[rt * 16 + g + 8 * h] = alpha[h];
      }
      __syncthreads();  // P and alpha visible

      // ---- O = O * alpha + P V for columns vcol0..+64, all M rows ----
#pragma unroll
      for (int a = 0; a < kRowTiles; ++a) {
        const float al0 = sAlpha[a * 16 + g], al1 = sAlpha[a * 16 + g + 8];
#pragma unroll
        for (int n = 0; n < S::kVNTiles; ++n) {
          o[a][n][0] *= al0;
          o[a][n][1] *= al0;
          o[a][n][2] *= al1;
          o[a][n][3] *= al1;
        }
      }
#pragma unroll
      for (int kk = 0; kk < kTileKeys / 16; ++kk) {
        uint32_t pa[kRowTiles][4];
#pragma unroll
        for (int a = 0; a < kRowTiles; ++a) {
          const int row = a * 16 + lane % 16;
          ptx::ldmatrix_x4(pa[a], sP + swz(row, 2 * kk + lane / 16, kTileKeys * 2));
        }
        const int key = kk * 16 + lane % 8 + ((lane / 8) & 1) * 8;
#pragma unroll
        for (int jp = 0; jp < S::kVNTiles / 2; ++jp) {
          uint32_t vb[4];
          ptx::ldmatrix_x4_trans(vb, sK + swz(key, (vcol0 + jp * 16) / 8 + lane / 16, RB));
#pragma unroll
          for (int a = 0; a < kRowTiles; ++a) {
            ptx::mma_bf16_16816(o[a][2 * jp], pa[a], vb[0], vb[1]);
            ptx::mma_bf16_16816(o[a][2 * jp + 1], pa[a], vb[2], vb[3]);
          }
        }
      }
      __syncthreads();  // the K/V buffer, P and the reductions may be overwritten
    }
    ptx::cp_async_wait<0>();

    // ---- epilogue: O / l, lse; direct to out/lse or to the partial slot ----
#pragma unroll
    for (int h = 0; h < 2; ++h)
      if (t == 0) {
        sRedSum[kg * M + rt * 16 + g + 8 * h] = l_run[h];
        if (kg == 0) sM[rt * 16 + g + 8 * h] = m_run[h];
      }
    __syncthreads();
    const bool bad = *sBad != 0;
#pragma unroll
    for (int a = 0; a < kRowTiles; ++a)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int lr = a * 16 + g + 8 * h;
        const int rr = row_block * M + lr;
        if (rr >= p.rows) continue;
        float l = 0.f;
#pragma unroll
        for (int k = 0; k < S::kKeyGroups; ++k) l += sRedSum[k * M + lr];
        const float m = sM[lr];
        float inv = l > 0.f ? 1.f / l : 0.f;
        float lse = l > 0.f ? (m + log2f(l)) * 0.69314718055994531f : kNegInf;
        if (bad) inv = lse = NAN;
        const int s = rr / p.h_q, hh = rr % p.h_q;
        if (pc.slot >= 0) {
          float* dst = p.partial_out + (int64_t(pc.slot) * p.rows + rr) * kDv + vcol0 + 2 * t;
#pragma unroll
          for (int n = 0; n < S::kVNTiles; ++n)
            *reinterpret_cast<float2*>(dst + n * 8) =
                make_float2(o[a][n][2 * h] * inv, o[a][n][2 * h + 1] * inv);
          if (warp == 0 && t == 0) p.partial_lse[int64_t(pc.slot) * p.rows + rr] = lse;
        } else {
          const int64_t off =
              b * p.out_stride_b + s * p.out_stride_s + hh * p.out_stride_h + vcol0 + 2 * t;
#pragma unroll
          for (int n = 0; n < S::kVNTiles; ++n) {
            const float x0 = o[a][n][2 * h] * inv, x1 = o[a][n][2 * h + 1] * inv;
            if (p.out_f32)
              *reinterpret_cast<float2*>(static_cast<float*>(p.out) + off + n * 8) =
                  make_float2(x0, x1);
            else
              *reinterpret_cast<uint32_t*>(static_cast<__nv_bfloat16*>(p.out) + off + n * 8) =
                  ptx::pack_bf16x2(x0, x1);
          }
          if (warp == 0 && t == 0)
            p.lse[b * p.lse_stride_b + hh * p.lse_stride_h + s * p.lse_stride_s] = lse;
        }
      }
  }
}

template <int kRowTiles, bool kFp8>
cudaError_t launch_main_t(const DecodeParams& p, int row_blocks, cudaStream_t stream) {
  using S = MainShape<kRowTiles, kFp8>;
  auto* kernel = decode_main_kernel<kRowTiles, kFp8>;
  // Raising the dynamic shared-memory limit is a per-function attribute; it is
  // cheap and legal during stream capture, so it is set on every launch rather
  // than cached per device.
  cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(S::kSmemBytes));
  if (e != cudaSuccess) return e;
  kernel<<<dim3(p.num_workers, row_blocks), kThreads, S::kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_main_fp8(const DecodeParams& p, int row_tiles, int row_blocks,
                            cudaStream_t stream);

}  // namespace mla::cuda::decode
