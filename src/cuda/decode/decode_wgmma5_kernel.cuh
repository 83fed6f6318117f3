// Main decode kernel "v5": v4 (decode_wgmma_kernel.cuh) with the tensor pipe
// kept fed across the tile boundary. Same roles, shared-memory map, register
// split, producer, params and output contract as v4; only the math
// warpgroups' order of work differs.
//
// v4, per 64-key tile j:   S(j) ; wait ; softmax(j) ; P.V(j) ; wait.
//   The pipe drains twice per tile and each wgmma batch waits for the issue
//   of the previous one's consumer.
// v5:                      P.V(j) ; S(j+1)  (issued back to back, two groups)
//                          wait<1>  -> P.V(j) done: stage j back to the producer
//                          wait<0>  -> softmax(j+1), P(j+1) into shared memory.
//   One drain per tile instead of two, and the stage of tile j is released as
//   soon as its P.V completes (while S(j+1) still runs).
// Why P.V(j) before S(j+1) and not the FA3 order (S(j+1) first, softmax(j+1)
// hidden under P.V(j)): there are only two K/V stages (Q 72 KB + 2 x 72 KB + P
// 8 KB = 224 KB of 227). S(j+1) needs stage j+1 while P.V(j) still reads stage
// j, so with S first the stage of tile j+2 could only be refilled after
// P.V(j), i.e. right before S(j+2) is issued: every load would be exposed
// (~2200 cycles per tile at the H200's read bandwidth). With P.V first, the
// producer gets S(j+1) + softmax(j+1) of lead time for tile j+2.
// The row-max barrier of tile j+1 also orders P(j+1)'s stores after both
// warpgroups' P.V(j) (each waited for its own before arriving), so the single
// P buffer needs no extra barrier.
#pragma once
#include "cuda/decode/decode_wgmma_kernel.cuh"

namespace mla::cuda::decode::v5 {

using v4::kBarMax;
using v4::kBarP;
using v4::kBarQ;
using v4::kBlocks;
using v4::kM;
using v4::kMathThreads;
using v4::kStages;
using v4::kThreads;
using v4::kTileBytes;
using v4::Regs;

// The producer warpgroup's loop (the same tile sequence as the math loop).
template <bool kFp8>
__device__ __forceinline__ void producer_loop(const DecodeParams& p, uint8_t* sKv, int* sFlag,
                                              uint64_t* full, uint64_t* empty, int piece_begin,
                                              int piece_end, int ptid) {
  uint32_t cnt = 0;  // tiles produced so far (stage = cnt % 2, pass = cnt / 2)
  for (int pi = piece_begin; pi < piece_end; ++pi) {
    const Piece pc = p.pieces[pi];
    const v4::PieceInfo in = v4::piece_info(p, pc);
    for (int it = 0; it < in.n_tiles; ++it, ++cnt) {
      const int st = cnt % kStages;
      ptx::mbar_wait(&empty[st], ((cnt / kStages) & 1) ^ 1);
      uint8_t* stage = sKv + st * kTileBytes;
      const bool bad = v4::produce_tile<kFp8>(p, stage, in.b, pc.tile_begin + it, in.key_end, ptid);
      const unsigned any_bad = __any_sync(0xffffffffu, bad);
      if ((ptid & 31) == 0) sFlag[st * 4 + ptid / 32] = any_bad ? 1 : 0;
      if constexpr (!kFp8) {
        ptx::cp_async_commit();
        ptx::cp_async_wait<0>();
      }
      wgmma::fence_proxy_async();  // the tile's generic writes before wgmma's async reads
      ptx::mbar_arrive(&full[st]);
    }
  }
}

// Waits for the stage of tile number `cnt`; returns whether its producer saw a bad page id.
__device__ __forceinline__ bool wait_full(uint64_t* full, const int* sFlag, uint32_t cnt) {
  const int st = cnt % kStages;
  ptx::mbar_wait(&full[st], (cnt / kStages) & 1);
  return (sFlag[st * 4] | sFlag[st * 4 + 1] | sFlag[st * 4 + 2] | sFlag[st * 4 + 3]) != 0;
}

// Whether the stage of tile number `cnt` is full, as one answer for the whole
// warpgroup (wgmma is issued by all 128 threads or none): each thread tests
// the mbarrier without blocking, and a per-warpgroup barrier (ids 4, 5; 1-3
// are v4's) ANDs the answers. A phase once complete stays complete until the
// stage is consumed, so "ready" is never wrong, only possibly late.
__device__ __forceinline__ bool stage_ready_in_warpgroup(uint64_t* full, uint32_t cnt, int wg) {
  const int st = cnt % kStages;
  uint32_t ready;
  asm volatile(
      "{\n"
      ".reg .pred p, q;\n"
      "mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "bar.red.and.pred q, %3, 128, p;\n"
      "selp.u32 %0, 1, 0, q;\n"
      "}\n"
      : "=r"(ready)
      : "r"(ptx::smem_addr(&full[st])), "r"((cnt / kStages) & 1), "r"(4 + wg)
      : "memory");
  return ready != 0;
}

// S[64 x 32] = Q K[wg*32..+32]^T over the 576 dims, issued and committed (not waited).
__device__ __forceinline__ void issue_s(float (&sacc)[4][4], uint32_t aQ, uint32_t aTile, int wg) {
  wgmma::fence();
#pragma unroll
  for (int kb = 0; kb < kBlocks; ++kb)
#pragma unroll
    for (int k4 = 0; k4 < 4; ++k4)
      wgmma::m64n32k16_ss(sacc, v4::desc_kmajor(aQ, 0, kb, k4),
                          v4::desc_kmajor(aTile, wg * 32, kb, k4), kb + k4 > 0);
  wgmma::commit();
  wgmma::fence_regs(sacc);
}

// O[:, wg*256..+256] += P V, issued and committed (not waited).
__device__ __forceinline__ void issue_pv(float (&o)[32][4], uint32_t aP, uint32_t aTile, int wg) {
  wgmma::fence();
#pragma unroll
  for (int kk = 0; kk < kTileKeys / 16; ++kk)
    wgmma::m64n256k16_ss_tb(o, v4::desc_kmajor(aP, 0, 0, kk), v4::desc_v(aTile, wg * 256, kk),
                            true);
  wgmma::commit();
  wgmma::fence_regs(o);
}

// Online softmax of one tile (log2 domain) from the finished S accumulators:
// masks keys past each row's limit, exchanges the row maxima with the other
// warpgroup (barrier kBarMax), updates the running max / partial sum, returns
// the O rescale factor in alpha and stores this warpgroup's 64 x 32 half of
// P (bf16, K-major SW128) into sP, then meets the other warpgroup at kBarP.
// Callers guarantee that both warpgroups' P.V of the previous tile completed
// before they arrive at kBarMax (sP is overwritten after it).
struct SoftmaxThread {
  int wg, c, r0;
  int lim[2];
  float scale_log2;
};
__device__ __forceinline__ void softmax_tile(const SoftmaxThread& t, float (&sacc)[4][4], int tile,
                                             uint32_t cnt, float* sMax, uint8_t* sP,
                                             float (&m_run)[2], float (&l_part)[2],
                                             float (&alpha)[2]) {
  const float kNegInf = -INFINITY;
  float mx[2] = {kNegInf, kNegInf};
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int h = e / 2;
      const int key = tile * kTileKeys + t.wg * 32 + 8 * i + 2 * t.c + (e & 1);
      const float s = key < t.lim[h] ? sacc[i][e] * t.scale_log2 : kNegInf;
      sacc[i][e] = s;
      mx[h] = fmaxf(mx[h], s);
    }
  float* maxbuf = sMax + (cnt & 1) * 2 * kM;  // parity-double-buffered: no WAR across tiles
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
    if (t.c == 0) maxbuf[t.wg * kM + t.r0 + 8 * h] = mx[h];
  }
  ptx::named_barrier_sync(kBarMax, kMathThreads);
  float m_use[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float other = maxbuf[(1 - t.wg) * kM + t.r0 + 8 * h];
    const float m_new = fmaxf(m_run[h], fmaxf(mx[h], other));
    m_use[h] = m_new == kNegInf ? 0.f : m_new;  // all masked so far: avoid -inf - -inf
    alpha[h] = ptx::fast_exp2(m_run[h] - m_use[h]);
    m_run[h] = m_new;
    l_part[h] *= alpha[h];
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float pv[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      pv[e] = ptx::fast_exp2(sacc[i][e] - m_use[e / 2]);
      l_part[e / 2] += pv[e];
    }
    // P[row][wg*32 + 8i + 2c]: chunk wg*4 + i of the 128-byte row, K-major SW128.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = t.r0 + 8 * h;
      *reinterpret_cast<uint32_t*>(sP + r * 128 + (((t.wg * 4 + i) ^ (r & 7)) << 4) + 4 * t.c) =
          ptx::pack_bf16x2(pv[2 * h], pv[2 * h + 1]);
    }
  }
  wgmma::fence_proxy_async();  // P's st.shared before the wgmma reads of both warpgroups
  ptx::named_barrier_sync(kBarP, kMathThreads);
}

template <bool kFp8>
__global__ void __launch_bounds__(kThreads, 1) decode_wgmma5_kernel(const DecodeParams p) {
  extern __shared__ __align__(1024) uint8_t smem[];
  uint8_t* sQ = smem + v4::kQOff;
  uint8_t* sKv = smem + v4::kKvOff;
  uint8_t* sP = smem + v4::kPOff;
  float* sMax = reinterpret_cast<float*>(smem + v4::kMaxOff);
  float* sL = reinterpret_cast<float*>(smem + v4::kLOff);
  int* sFlag = reinterpret_cast<int*>(smem + v4::kFlagOff);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + v4::kBarOff);
  uint64_t* empty = full + kStages;

  const int tid = threadIdx.x;
  // The swizzle is applied on absolute shared addresses: tiles must be 1024-aligned.
  if ((ptx::smem_addr(smem) & 1023) != 0) __trap();
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      ptx::mbar_init(&full[s], 128);            // every producer thread arrives
      ptx::mbar_init(&empty[s], kMathThreads);  // every math thread arrives
    }
    ptx::mbar_fence_init();
  }
  __syncthreads();

  const int row_block = blockIdx.y;
  const int piece_begin = p.worker_begin[blockIdx.x];
  const int piece_end = p.worker_begin[blockIdx.x + 1];

  if (tid >= kMathThreads) {
    wgmma::setmaxnreg_dec<Regs<kFp8>::kProducer>();
    producer_loop<kFp8>(p, sKv, sFlag, full, empty, piece_begin, piece_end, tid - kMathThreads);
    return;
  }

  // ================= math warpgroups =================
  wgmma::setmaxnreg_inc<Regs<kFp8>::kMath>();
  SoftmaxThread t;
  t.wg = tid / 128;  // 0 or 1: keys wg*32..+32 of S, value columns wg*256..+256 of O
  const int lane = tid % 32;
  t.c = lane % 4;
  t.r0 = 16 * ((tid % 128) / 32) + lane / 4;  // this thread's rows r0 and r0 + 8 of the 64
  t.scale_log2 = p.scale_log2;
  const int wg = t.wg, c = t.c, r0 = t.r0;
  const uint32_t aQ = ptx::smem_addr(sQ), aKv = ptx::smem_addr(sKv), aP = ptx::smem_addr(sP);
  const float kNegInf = -INFINITY;
  uint32_t cnt = 0;  // tiles consumed so far (same sequence as the producer's)

  for (int pi = piece_begin; pi < piece_end; ++pi) {
    const Piece pc = p.pieces[pi];
    const v4::PieceInfo in = v4::piece_info(p, pc);
    // Q rows of this row block (rows past `rows` are zero). The previous
    // piece's wgmmas all completed (waited before its epilogue barrier).
    for (int idx = tid; idx < kM * kChunksPerRow; idx += kMathThreads) {
      const int r = idx / kChunksPerRow, q = idx % kChunksPerRow;
      const int rr = row_block * kM + r;
      const bool valid = rr < p.rows;
      const int s = valid ? rr / p.h_q : 0, h = valid ? rr % p.h_q : 0;
      const __nv_bfloat16* src = static_cast<const __nv_bfloat16*>(p.q) + in.b * p.q_stride_b +
                                 s * p.q_stride_s + h * p.q_stride_h + q * 8;
      ptx::cp_async_16(sQ + v4::tile_off(r, q), valid ? src : p.q, valid);
    }
    ptx::cp_async_commit();
    ptx::cp_async_wait<0>();
    wgmma::fence_proxy_async();
    ptx::named_barrier_sync(kBarQ, kMathThreads);

    // Key limit of this thread's two rows (causal among the s_q new tokens).
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int rr = row_block * kM + r0 + 8 * h;
      if (rr >= p.rows) {
        t.lim[h] = INT32_MIN;
      } else {
        const int s = rr / p.h_q;
        t.lim[h] = min(p.causal ? in.len - (p.s_q - 1 - s) : in.len, in.key_end);
      }
    }

    bool bad = in.bad_request;
    float m_run[2] = {kNegInf, kNegInf}, l_part[2] = {0.f, 0.f}, alpha[2] = {0.f, 0.f};
    float o[32][4];
#pragma unroll
    for (int i = 0; i < 32; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[i][e] = 0.f;
    float sacc[4][4];

    // Prologue: S(0) and its softmax. sP is free: the previous piece's P.V
    // completed before its epilogue barrier.
    if (in.n_tiles > 0) {
      bad |= wait_full(full, sFlag, cnt);
      issue_s(sacc, aQ, aKv + (cnt % kStages) * kTileBytes, wg);
      wgmma::wait<0>();
      wgmma::fence_regs(sacc);
      softmax_tile(t, sacc, pc.tile_begin, cnt, sMax, sP, m_run, l_part, alpha);
    }

    for (int it = 0; it < in.n_tiles; ++it, ++cnt) {
      const int st = cnt % kStages;
      // ---- O = O * alpha(it) + P(it) V(it), then S(it+1) behind it ----
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        o[i][0] *= alpha[0];
        o[i][1] *= alpha[0];
        o[i][2] *= alpha[1];
        o[i][3] *= alpha[1];
      }
      issue_pv(o, aP, aKv + st * kTileBytes, wg);
      const bool has_next = it + 1 < in.n_tiles;
      // Back to back only when tile it+1 is already resident: otherwise
      // waiting for it here would also hold stage `st` (the producer's next
      // target) until it arrives, serialising the loads on memory-bound
      // shapes; then drain P.V(it) and release the stage first, as v4 does.
      // The answer is made warp-uniform (vote) and the two paths are one
      // if/else, so that ptxas sees no divergent wgmma path (else it
      // serialises every wgmma of the kernel: C7520 / C7514).
      const bool overlap =
          __all_sync(0xffffffffu, has_next && stage_ready_in_warpgroup(full, cnt + 1, wg));
      if (overlap) {
        bad |= wait_full(full, sFlag, cnt + 1);  // complete: returns at once, reads the flags
        issue_s(sacc, aQ, aKv + ((cnt + 1) % kStages) * kTileBytes, wg);
        wgmma::wait<1>();  // groups complete in order: P.V(it) is done, S(it+1) may run on
        wgmma::fence_regs(o);
        ptx::mbar_arrive(&empty[st]);  // stage `st` is no longer read by this thread's wgmmas
        wgmma::wait<0>();
        wgmma::fence_regs(sacc);
      } else {
        wgmma::wait<0>();
        wgmma::fence_regs(o);
        ptx::mbar_arrive(&empty[st]);
        if (has_next) {
          bad |= wait_full(full, sFlag, cnt + 1);
          issue_s(sacc, aQ, aKv + ((cnt + 1) % kStages) * kTileBytes, wg);
          wgmma::wait<0>();
          wgmma::fence_regs(sacc);
        }
      }
      if (has_next) {
        // Both warpgroups arrive at its kBarMax after their own P.V(it)
        // completed (waited above), so P(it+1) may overwrite sP after it.
        softmax_tile(t, sacc, pc.tile_begin + it + 1, cnt + 1, sMax, sP, m_run, l_part, alpha);
      }
    }

    // ---- epilogue: l over the quad and both warpgroups; O / l, lse ----
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l_part[h] += __shfl_xor_sync(0xffffffffu, l_part[h], 1);
      l_part[h] += __shfl_xor_sync(0xffffffffu, l_part[h], 2);
      if (c == 0) sL[wg * kM + r0 + 8 * h] = l_part[h];
    }
    ptx::named_barrier_sync(kBarQ, kMathThreads);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int lr = r0 + 8 * h;
      const int rr = row_block * kM + lr;
      if (rr >= p.rows) continue;
      const float l = sL[lr] + sL[kM + lr];
      float inv = l > 0.f ? 1.f / l : 0.f;
      float lse = l > 0.f ? (m_run[h] + log2f(l)) * 0.69314718055994531f : kNegInf;
      if (bad) inv = lse = NAN;
      const int s = rr / p.h_q, hh = rr % p.h_q;
      const int col0 = wg * 256 + 2 * c;
      if (pc.slot >= 0) {
        float* dst = p.partial_out + (int64_t(pc.slot) * p.rows + rr) * kDv + col0;
#pragma unroll
        for (int i = 0; i < 32; ++i)
          *reinterpret_cast<float2*>(dst + 8 * i) =
              make_float2(o[i][2 * h] * inv, o[i][2 * h + 1] * inv);
        if (wg == 0 && c == 0) p.partial_lse[int64_t(pc.slot) * p.rows + rr] = lse;
      } else {
        const int64_t off = in.b * p.out_stride_b + s * p.out_stride_s + hh * p.out_stride_h + col0;
#pragma unroll
        for (int i = 0; i < 32; ++i) {
          const float x0 = o[i][2 * h] * inv, x1 = o[i][2 * h + 1] * inv;
          if (p.out_f32)
            *reinterpret_cast<float2*>(static_cast<float*>(p.out) + off + 8 * i) =
                make_float2(x0, x1);
          else
            *reinterpret_cast<uint32_t*>(static_cast<__nv_bfloat16*>(p.out) + off + 8 * i) =
                ptx::pack_bf16x2(x0, x1);
        }
        if (wg == 0 && c == 0)
          p.lse[in.b * p.lse_stride_b + hh * p.lse_stride_h + s * p.lse_stride_s] = lse;
      }
    }
  }
}

}  // namespace mla::cuda::decode::v5
