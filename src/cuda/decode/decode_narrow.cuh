// The narrow math of the decode kernel: row blocks of at most kNarrowRows
// (16) query rows, the fp8 caches' 16-head decode (h_q 16, s_q 1: the
// tensor-parallel deployment's shape). Included by decode_kernel.cuh after the
// pieces it shares (load_q_rows, piece_info, key_scale, descriptors); the
// producer warpgroup, the stages and their full/empty barriers are the
// kernel's.
//
// Why. The 64-row math does a 64 x 64 x (576 + 512) MMA and reads Q (72 KB)
// once per warpgroup per tile from shared memory whatever the number of valid
// rows: at 16 heads 3/4 of that is for zero rows, and it sets the period
// (2.35 us per tile for bf16 at h16 and at h128 alike on the H200, 3.0 us for
// fp8_e4m3 and 4.0 for fp8_ds_mla, again equal at both head counts: not the
// memory). Transposed, the M dim of wgmma is the keys or the value dims and N
// the 16 rows:
//   S^T [64 keys x 16] = K [64 x 576] Q^T       (36 m64n16k16, A = the stage
//     K-major, B = Q's first 16 rows, K-major)
//   O^T [512 x 16] += V^T [512 x 64] P^T         (8 x 4 m64n16k16, A = the
//     stage read MN-major (tnspA): the value dims are contiguous in it)
// a quarter of the MMA work, and Q is read as 18 KB per tile.
//
// Work split: warpgroup wg takes the worker's tiles cnt % 2 == wg (its stage
// is always stage wg), each with its own running max, sum and O^T (all 512
// value columns x 16 rows: 64 accumulators per thread), so the two never meet
// inside a tile; their tiles overlap (one's softmax under the other's MMAs).
// At the end of a piece the two states are merged (max, sums, O) through
// shared memory, Q's region serving as the scratch (Q is reloaded per piece).
//
// Rows 16..63 of the Q block are zero (load_q_rows) and never read: B = Q
// covers rows 0..15 only, so no garbage row exists.
//
// Accumulator of m64n16 (wgmma.cuh): thread (warp wi, g = lane / 4, c =
// lane % 4) holds d[i][2h + j] = M-row 16 wi + g + 8h, column 8i + 2c + j:
// for S^T keys 16 wi + g (+8) of the tile, query rows q(i, j) = 8i + 2c + j.
// A row's max and sum over the 64 keys: over g (shuffles), h (in the thread)
// and the 4 warps (shared memory, one meeting of the warpgroup).
//
// Barriers. The warpgroups meet each other only at a piece's load and end,
// through named barriers of all 256 math threads (kBarQ, kBarMax, kBarP),
// which every math warp passes in the same sequence. Inside its tiles a
// warpgroup meets itself twice per tile through its own mbarrier
// (narrow_wg_sync), not a named barrier: the two run different numbers of
// tiles (odd tile counts), and with per-warpgroup named barriers racecheck
// reported the piece end's scratch and row totals as races (rounds C and E)
// although bar.sync orders them. Protocol: scripts/models/decode_narrow_barriers.py.
#pragma once

namespace mla::cuda::decode {

// Each math warpgroup's own barrier: an mbarrier of its 128 threads, in
// phase 0 at the start (decode_kernel's initialisation, thread 0).
__device__ __forceinline__ void narrow_init_barriers(uint8_t* smem) {
  uint64_t* wg_bar = reinterpret_cast<uint64_t*>(smem + kNarrowWgBarOff);
  for (int wg = 0; wg < 2; ++wg) ptx::mbar_init(&wg_bar[wg], 128);
}

// The warpgroup's n-th meeting (n from 0, counted by every thread alike):
// arrive (release: this thread's shared-memory writes), then wait until all
// 128 arrived (acquire). A thread cannot arrive for meeting n + 1 before
// meeting n completed, so the phase it waits for is never two ahead.
__device__ __forceinline__ void narrow_wg_sync(uint64_t* wg_bar, uint32_t& n) {
  ptx::mbar_arrive(wg_bar);
  ptx::mbar_wait(wg_bar, n & 1);
  ++n;
}

// Query row of accumulator column (i, j) of this thread.
__device__ __forceinline__ int narrow_row(int i, int j, int c) {
  return 8 * i + 2 * c + j;
}

// Byte offset of P^T's (query row q, key k) in the warpgroup's 16 x 64 f16
// block: row q of 128 bytes, K-major SW128 (the B operand of O^T).
__device__ __forceinline__ uint32_t narrow_p_off(int q, int k) {
  return q * 128 + ((((k >> 3) ^ (q & 7))) << 4) + (k & 7) * 2;
}

// The end of a piece: the two warpgroups' (max, sum, O^T) merged; warpgroup
// wg writes value columns wg*256..+256 of the 16 rows to out/lse or the
// piece's fp32 partial. Three barriers of the 256 math threads (kBarQ,
// kBarMax, kBarP): the first publishes the maxima, the sums and each warp's
// `bad` (what it saw in its own tiles), and follows every S^T wgmma of the
// piece (Q's region becomes the scratch); the second publishes the scratch;
// the third keeps the next piece's Q load from overwriting it while it is
// read.
template <class KeySrc>
__device__ __forceinline__ void narrow_finish(const DecodeParams& p, const Piece& pc, int b,
                                              int row_block, int wg, int wtid, float (&o)[8][2][4],
                                              const float (&m_run)[2][2], float (&l_part)[2][2],
                                              bool bad, uint8_t* smem, float v_scale) {
  float* sL = reinterpret_cast<float*>(smem + kLOff);        // [2 wg][4 warps][16]
  float* sM = reinterpret_cast<float*>(smem + kNarrowMOff);  // [2 wg][16]
  float* scratch = reinterpret_cast<float*>(smem + kQOff);   // [2 wg][4 mb][128 thr][8]
  int* sBad = reinterpret_cast<int*>(smem + kNarrowBadOff);  // [8 warps]
  const int wi = wtid / 32, lane = wtid % 32, g = lane / 4, c = lane % 4;
  const float kNegInf = -INFINITY;
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      float l = l_part[i][j];
      l += __shfl_xor_sync(0xffffffffu, l, 4);
      l += __shfl_xor_sync(0xffffffffu, l, 8);
      l += __shfl_xor_sync(0xffffffffu, l, 16);
      const int q = narrow_row(i, j, c);
      if (g == 0) sL[wg * 64 + wi * 16 + q] = l;
      if (g == 0 && wi == 0) sM[wg * 16 + q] = m_run[i][j];
    }
  bad = __any_sync(0xffffffffu, bad);
  if (lane == 0) sBad[wg * 4 + wi] = bad ? 1 : 0;
  ptx::named_barrier_sync(kBarQ, kMathThreads);
#pragma unroll
  for (int w = 0; w < 8; ++w) bad |= sBad[w] != 0;
  float f_own[2][2], inv[2][2], lse[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int q = narrow_row(i, j, c);
      const float m0 = sM[q], m1 = sM[16 + q];
      const float m = fmaxf(m0, m1);
      float l0 = 0.f, l1 = 0.f;
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        l0 += sL[w * 16 + q];
        l1 += sL[64 + w * 16 + q];
      }
      // A warpgroup that saw no unmasked key has m = -inf, l = 0, O = 0.
      const float e0 = m0 == kNegInf ? 0.f : ptx::fast_exp2(m0 - m);
      const float e1 = m1 == kNegInf ? 0.f : ptx::fast_exp2(m1 - m);
      const float l = l0 * e0 + l1 * e1;
      f_own[i][j] = wg ? e1 : e0;
      inv[i][j] = l > 0.f ? v_scale / l : 0.f;
      lse[i][j] = l > 0.f ? (m + log2f(l)) * 0.69314718055994531f : kNegInf;
      if (bad) inv[i][j] = lse[i][j] = NAN;
    }
    // The value columns the other warpgroup writes, scaled to the common max.
#pragma unroll
  for (int m = 0; m < 4; ++m) {
    // o[4 (1 - wg) + m], by selects: a runtime index would put o in local memory.
    float4* dst = reinterpret_cast<float4*>(scratch + ((wg * 4 + m) * 128 + wtid) * 8);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float v[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) v[e] = (wg ? o[m][i][e] : o[4 + m][i][e]) * f_own[i][e & 1];
      dst[i] = make_float4(v[0], v[1], v[2], v[3]);
    }
  }
  ptx::named_barrier_sync(kBarMax, kMathThreads);
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int q = narrow_row(i, j, c);
      const int rr = row_block * kM + q;
      if (rr >= p.rows) continue;
      const int hh = rr % p.h_q;
      int tb, s;
      KeySrc::coords(p, b, rr / p.h_q, &tb, &s);
      if (wg == 0 && wi == 0 && g == 0) {
        if (pc.slot >= 0)
          p.partial_lse[int64_t(pc.slot) * p.rows + rr] = lse[i][j];
        else
          p.lse[tb * p.lse_stride_b + hh * p.lse_stride_h + s * p.lse_stride_s] = lse[i][j];
      }
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        const float* src = scratch + (((1 - wg) * 4 + m) * 128 + wtid) * 8 + 4 * i;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int e = 2 * h + j;
          const float own = wg ? o[4 + m][i][e] : o[m][i][e];  // o[mb], by a select
          const float x = (own * f_own[i][j] + src[e]) * inv[i][j];
          const int col = (4 * wg + m) * 64 + 16 * wi + g + 8 * h;
          if (pc.slot >= 0) {
            p.partial_out[(int64_t(pc.slot) * p.rows + rr) * kDv + col] = x;
          } else {
            const int64_t off =
                tb * p.out_stride_b + s * p.out_stride_s + hh * p.out_stride_h + col;
            if (p.out_f32)
              static_cast<float*>(p.out)[off] = x;
            else
              static_cast<__nv_bfloat16*>(p.out)[off] = __float2bfloat16_rn(x);
          }
        }
      }
    }
  ptx::named_barrier_sync(kBarP, kMathThreads);
}

// The math warpgroups' loop of the narrow kernel (tid 0..255).
template <class KeySrc, KvFormat kFormat>
__device__ __forceinline__ void narrow_math(const DecodeParams& p, uint8_t* smem, int piece_begin,
                                            int piece_end, int row_block, int tid) {
  static_assert(kv_format_is_fp8(kFormat) && !KeySrc::kIndexed,
                "the narrow kernel serves the fp8 caches' dense decode");
  constexpr bool kKeyShift = kFormat == KvFormat::fp8_ds_mla;  // Fp8Entry::kKeyShift
  constexpr wgmma::Elem kElem = wgmma::Elem::kF16;
  uint8_t* sQ = smem + kQOff;
  float* sMax = reinterpret_cast<float*>(smem + kMaxOff);  // [2 parity][2 wg][4 warps][16]
  const int* sFlag = reinterpret_cast<const int*>(smem + kFlagOff);
  float* sQScale = reinterpret_cast<float*>(smem + kQScaleOff);
  const float* sKeyFac = reinterpret_cast<const float*>(smem + kKeyFacOff);
  const int* sKeyFlag = reinterpret_cast<const int*>(smem + kKeyFlagOff);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kBarOff);
  uint64_t* empty = full + kStages;
  // Warp-uniform through lane 0 (uniform registers for the descriptors).
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);
  uint64_t* wg_bar = reinterpret_cast<uint64_t*>(smem + kNarrowWgBarOff) + wg;
  uint32_t wg_meets = 0;  // this warpgroup's narrow_wg_sync so far
  const int wtid = tid % 128, wi = wtid / 32, lane = tid % 32;
  const int g = lane / 4, c = lane % 4;
  uint8_t* sPw = smem + kPOff + wg * 2048;  // this warpgroup's P^T: 16 rows x 64 keys f16
  const uint32_t aQ = ptx::smem_addr(sQ), aKv = ptx::smem_addr(smem + kKvOff);
  const uint32_t aP = ptx::smem_addr(sPw);
  const float kNegInf = -INFINITY;
  uint32_t cnt = 0;  // the worker's tiles before this piece (same sequence as the producer's)

  for (int pi = piece_begin; pi < piece_end; ++pi) {
    const Piece pc = p.pieces[pi];
    const PieceInfo in = piece_info(p, pc);
    load_q_rows<KeySrc, true>(p, sQ, sQScale, in.b, row_block, tid, key_scale<kFormat>(p));
    // Per query row (i, j) of this thread: key limit and softmax scale.
    int lim[2][2];
    float row_scale[2][2];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int q = narrow_row(i, j, c);
        const int rr = row_block * kM + q;
        if (rr >= p.rows) {
          lim[i][j] = INT32_MIN;
        } else {
          const int s = rr / p.h_q;
          lim[i][j] = min(p.causal ? in.len - (p.s_q - 1 - s) : in.len, in.key_end);
        }
        row_scale[i][j] = p.scale_log2 * sQScale[q];
      }

    bool bad = in.bad_request;
    float m_run[2][2], l_part[2][2];
    float o[8][2][4];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        m_run[i][j] = kNegInf;
        l_part[i][j] = 0.f;
      }
#pragma unroll
    for (int mb = 0; mb < 8; ++mb)
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[mb][i][e] = 0.f;

    // This warpgroup's tiles of the piece: worker tile k = cnt + it with k % 2 == wg.
    for (int it = wg ^ int(cnt & 1); it < in.n_tiles; it += 2) {
      const uint32_t k = cnt + uint32_t(it);
      const int st = int(k % kStages);  // == wg
      const uint32_t aTile = aKv + st * kTileBytes;
      ptx::mbar_wait(&full[st], (k / kStages) & 1);
      bad |= (sFlag[st * 4] | sFlag[st * 4 + 1] | sFlag[st * 4 + 2] | sFlag[st * 4 + 3]) != 0;
      // fp8_ds_mla: whether a key of the tile is stored shifted, and the
      // factors 2^e_key of this thread's keys 16 wi + g, +8.
      bool key_shifted = false;
      float kf[2] = {1.f, 1.f};
      if constexpr (kKeyShift) {
        const int kfl =
            sKeyFlag[st * 4] | sKeyFlag[st * 4 + 1] | sKeyFlag[st * 4 + 2] | sKeyFlag[st * 4 + 3];
        bad |= (kfl & 2) != 0;
        key_shifted = (kfl & 1) != 0;
        kf[0] = sKeyFac[st * kTileKeys + 16 * wi + g];
        kf[1] = sKeyFac[st * kTileKeys + 16 * wi + g + 8];
      }

      // ---- S^T [64 keys x 16 rows] = K Q^T over the 576 dims ----
      float sacc[2][4];
      const uint64_t dK = desc_kmajor(aTile, 0, 0, 0), dQ = desc_kmajor(aQ, 0, 0, 0);
      wgmma::fence();
#pragma unroll
      for (int kb = 0; kb < kBlocks; ++kb)
#pragma unroll
        for (int k4 = 0; k4 < 4; ++k4)
          wgmma::mma_ss<kElem, 16>(sacc, wgmma::desc_advance(dK, kmajor_step(kb, k4)),
                                   wgmma::desc_advance(dQ, kmajor_step(kb, k4)), kb + k4 > 0);
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::fence_regs(sacc);
      if constexpr (kKeyShift) {  // S's keys times 2^e_key (exact: powers of two)
        if (key_shifted) {
#pragma unroll
          for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e) sacc[i][e] *= kf[e / 2];
        }
      }

      // ---- online softmax (log2 domain) over the warpgroup's 64 keys ----
      const int key0 = (pc.tile_begin + it) * kTileKeys + 16 * wi + g;  // +8h
      float mx[2][2];
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          float m = kNegInf;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int e = 2 * h + j;
            const float s = key0 + 8 * h < lim[i][j] ? sacc[i][e] * row_scale[i][j] : kNegInf;
            sacc[i][e] = s;
            m = fmaxf(m, s);
          }
          m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 4));
          m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 8));
          m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 16));
          mx[i][j] = m;
        }
      // Parity-double-buffered per warpgroup: the P meeting below separates
      // a buffer's reads from its rewrite two tiles later.
      float* maxbuf = sMax + ((k / kStages) & 1) * 128 + wg * 64;
      if (g == 0) {
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
          for (int j = 0; j < 2; ++j) maxbuf[wi * 16 + narrow_row(i, j, c)] = mx[i][j];
      }
      // Also: every warp of the warpgroup waited for its previous P.V, so P^T
      // may be overwritten after this meeting.
      narrow_wg_sync(wg_bar, wg_meets);
      float alpha[2][2], m_use[2][2];
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int q = narrow_row(i, j, c);
          const float m_tile =
              fmaxf(fmaxf(maxbuf[q], maxbuf[16 + q]), fmaxf(maxbuf[32 + q], maxbuf[48 + q]));
          const float m_new = fmaxf(m_run[i][j], m_tile);
          m_use[i][j] = m_new == kNegInf ? 0.f : m_new;  // all masked so far: no -inf - -inf
          alpha[i][j] = ptx::fast_exp2(m_run[i][j] - m_use[i][j]);
          m_run[i][j] = m_new;
          l_part[i][j] *= alpha[i][j];
        }
        // P^T: P[q][key] in f16, times 2^e_key after the row sum (fp8_ds_mla;
        // without a branch, the factors are 1 for unshifted keys).
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            float pv = ptx::fast_exp2(sacc[i][2 * h + j] - m_use[i][j]);
            l_part[i][j] += pv;
            if constexpr (kKeyShift) pv *= kf[h];
            *reinterpret_cast<__half*>(
                sPw + narrow_p_off(narrow_row(i, j, c), 16 * wi + g + 8 * h)) = __float2half_rn(pv);
          }
      wgmma::fence_proxy_async();  // P^T's st.shared before the warpgroup's wgmma reads
      narrow_wg_sync(wg_bar, wg_meets);

      // ---- O^T [512 x 16] = O^T alpha + V^T P^T ----
#pragma unroll
      for (int mb = 0; mb < 8; ++mb)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          o[mb][i][0] *= alpha[i][0];
          o[mb][i][1] *= alpha[i][1];
          o[mb][i][2] *= alpha[i][0];
          o[mb][i][3] *= alpha[i][1];
        }
      const uint64_t dV = desc_v(aTile, 0, 0), dP = desc_kmajor(aP, 0, 0, 0);
      wgmma::fence();
#pragma unroll
      for (int mb = 0; mb < 8; ++mb)
#pragma unroll
        for (int kk = 0; kk < kTileKeys / 16; ++kk)
          wgmma::mma_ss<kElem, 16, false, true>(
              o[mb], wgmma::desc_advance(dV, uint32_t(mb * kBlockBytes + kk * 16 * 128)),
              wgmma::desc_advance(dP, kmajor_step(0, kk)), true);
      wgmma::commit();
      wgmma::wait<0>();
#pragma unroll
      for (int mb = 0; mb < 8; ++mb) wgmma::fence_regs(o[mb]);
      ptx::mbar_arrive(&empty[st]);
    }
    cnt += uint32_t(in.n_tiles);

    narrow_finish<KeySrc>(p, pc, in.b, row_block, wg, wtid, o, m_run, l_part, bad, smem,
                          key_scale<kFormat>(p));
  }
}

}  // namespace mla::cuda::decode
