// Pieces shared by the two prefill attention kernels: both hold scores and
// outputs in the m16n8 accumulator layout of wgmma (a thread owns
// rows g and g + 8 of its warp's 16, columns 8i + 2c and 8i + 2c + 1), so the
// causal mask, the online softmax and the epilogue are written once.
#pragma once
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "cuda/prefill/flash_fwd_params.hpp"
#include "cuda/prefill/prefill_ptx.cuh"

namespace mla::cuda::prefill {

// Output accumulators to zero.
template <int OT>
__device__ __forceinline__ void zero_acc(float (&o)[OT][4]) {
#pragma unroll
  for (int i = 0; i < OT; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
}

// Scores of keys past a row's last visible key `lim[r]` become -inf.
template <int NT>
__device__ __forceinline__ void mask_scores(float (&s)[NT][4], int n0, int cq,
                                            const int (&lim)[2]) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (n0 + nt * 8 + 2 * cq + (e & 1) > lim[e / 2]) s[nt][e] = -INFINITY;
}

// One online-softmax step over a key tile (base 2, scale folded in), in three
// pieces so that a pipelined kernel can run the first while the previous P.V
// product still accumulates into o, and the last two once it has landed:
//   softmax_exp:   moves the running max, turns s into exp2(s * scale - max)
//                  in place, rescales and adds to this thread's partial sums,
//                  and returns the factor alpha by which o must be rescaled;
//   rescale_rows:  o *= alpha, row by row;
//   pack_p:        the probabilities as bf16 A fragments (k16 steps) for P.V
//                  (the accumulator layout of S is the A-fragment layout of P).
//
// kFtzExp: exp2 as the bare ex2.approx.ftz instruction (results below 2^-126
// flush to 0: such a p is far under the bf16 rounding of the sum it joins)
// rather than exp2f, whose denormal handling adds instructions per element.
template <bool kFtzExp = false, int NT>
__device__ __forceinline__ void softmax_exp(float (&s)[NT][4], float (&row_max)[2],
                                            float (&row_sum)[2], float scale_log2,
                                            float (&alpha)[2]) {
  auto ex2 = [](float x) { return kFtzExp ? ptx::fast_exp2(x) : exp2f(x); };
  float scaled_max[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float m = row_max[r];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) m = fmaxf(m, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
    // A row that has seen only masked keys keeps max -inf: use 0 so that
    // exp2(-inf - 0) = 0 instead of exp2(-inf + inf) = NaN.
    const float ms = m == -INFINITY ? 0.f : m * scale_log2;
    alpha[r] = ex2(row_max[r] * scale_log2 - ms);  // old max -inf -> 0
    row_max[r] = m;
    scaled_max[r] = ms;
    row_sum[r] *= alpha[r];
  }
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s[nt][e] = ex2(fmaf(s[nt][e], scale_log2, -scaled_max[e / 2]));
    row_sum[0] += s[nt][0] + s[nt][1];
    row_sum[1] += s[nt][2] + s[nt][3];
  }
}

template <int OT>
__device__ __forceinline__ void rescale_rows(float (&o)[OT][4], const float (&alpha)[2]) {
#pragma unroll
  for (int i = 0; i < OT; ++i) {
    o[i][0] *= alpha[0];
    o[i][1] *= alpha[0];
    o[i][2] *= alpha[1];
    o[i][3] *= alpha[1];
  }
}

template <int NT>
__device__ __forceinline__ void pack_p(const float (&s)[NT][4], uint32_t (&pf)[NT / 2][4]) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    pf[nt / 2][(nt % 2) * 2 + 0] = pack_bf16x2(s[nt][0], s[nt][1]);
    pf[nt / 2][(nt % 2) * 2 + 1] = pack_bf16x2(s[nt][2], s[nt][3]);
  }
}

// The whole step at once (the kernels that wait for each P.V product).
template <int NT, int OT>
__device__ __forceinline__ void online_softmax(float (&s)[NT][4], float (&row_max)[2],
                                               float (&row_sum)[2], float (&o)[OT][4],
                                               float scale_log2, uint32_t (&pf)[NT / 2][4]) {
  float alpha[2];
  softmax_exp(s, row_max, row_sum, scale_log2, alpha);
  rescale_rows(o, alpha);
  pack_p(s, pf);
}

// Normalises and writes this thread's two rows (sequence rows row0, row0 + 8)
// of out and lse. A row with no visible key gets out 0 and lse -inf.
template <bool kOutF32, int OT>
__device__ __forceinline__ void write_rows(const FlashFwdParams& p, const float (&o)[OT][4],
                                           const float (&row_max)[2], const float (&row_sum)[2],
                                           int row0, int seq_q, int q_begin, int head, int cq) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = row_sum[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int row = row0 + 8 * r;
    if (row >= seq_q) continue;
    const bool empty = !(l > 0.f);
    const float inv = empty ? 0.f : 1.f / l;
    const int64_t tok = int64_t(q_begin) + row;
    if constexpr (kOutF32) {
      float* dst =
          static_cast<float*>(p.out) + tok * p.out_row_stride + int64_t(head) * p.out_head_stride;
#pragma unroll
      for (int i = 0; i < OT; ++i)
        *reinterpret_cast<float2*>(dst + i * 8 + 2 * cq) =
            make_float2(o[i][2 * r] * inv, o[i][2 * r + 1] * inv);
    } else {
      __nv_bfloat16* dst = static_cast<__nv_bfloat16*>(p.out) + tok * p.out_row_stride +
                           int64_t(head) * p.out_head_stride;
#pragma unroll
      for (int i = 0; i < OT; ++i)
        *reinterpret_cast<uint32_t*>(dst + i * 8 + 2 * cq) =
            pack_bf16x2(o[i][2 * r] * inv, o[i][2 * r + 1] * inv);
    }
    if (p.lse != nullptr && cq == 0)
      p.lse[int64_t(head) * p.lse_head_stride + tok * p.lse_row_stride] =
          empty ? -INFINITY : row_max[r] * p.softmax_scale + logf(l);
  }
}

// Where a CTA's work lies: its sequence's offsets and lengths and its query tile.
struct TileCoords {
  int q_begin, seq_q, k_begin, seq_k, q0, diag, n_tiles;
  bool valid;
};
// `m_block` counts query tiles from the heaviest (the last queries of the
// longest sequence); `b` is the sequence.
template <int kBlockM, int kBlockN>
__device__ __forceinline__ TileCoords tile_coords(const FlashFwdParams& p, int m_block, int b) {
  TileCoords t;
  t.q_begin = p.cu_seqlens_q ? p.cu_seqlens_q[b] : 0;
  t.seq_q = p.cu_seqlens_q ? p.cu_seqlens_q[b + 1] - t.q_begin : p.max_seqlen_q;
  t.k_begin = p.cu_seqlens_k ? p.cu_seqlens_k[b] : 0;
  t.seq_k = p.cu_seqlens_k ? p.cu_seqlens_k[b + 1] - t.k_begin : p.seqlen_k;
  // Heaviest causal tiles (the last queries) first, so the tail of the grid is short.
  const int m_blocks = (p.max_seqlen_q + kBlockM - 1) / kBlockM;
  t.q0 = (m_blocks - 1 - m_block) * kBlockM;
  t.valid = t.q0 < t.seq_q;
  t.diag = t.seq_k - t.seq_q + p.causal_shift;  // query i sees keys j <= i + diag
  int key_end = t.seq_k;
  if (p.causal) key_end = min(t.seq_k, t.q0 + kBlockM + t.diag);
  t.n_tiles = key_end > 0 ? (key_end + kBlockN - 1) / kBlockN : 0;
  return t;
}
template <int kBlockM, int kBlockN>
__device__ __forceinline__ TileCoords tile_coords(const FlashFwdParams& p) {
  return tile_coords<kBlockM, kBlockN>(p, int(blockIdx.x), int(blockIdx.z));
}

}  // namespace mla::cuda::prefill
