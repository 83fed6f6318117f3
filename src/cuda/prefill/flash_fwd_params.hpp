// Parameters of the causal flash-attention forward kernel (non-absorbed MLA
// prefill: d_qk 192 = 128 nope + 64 rope, d_v 128). Plain data, host-visible,
// so that the launcher and the tests can fill it without CUDA headers.
#pragma once
#include <cstdint>

namespace mla::cuda::prefill {

// Which kernel runs: wgmma (Hopper warpgroup MMA, the default), the mma.sync
// one (FA2 scheme), kept as a cross-check and for comparison, or wgmma_ws
// (warp-specialised: a TMA producer warp feeding two consumer warpgroups over
// 128-key tiles, S of the next tile overlapping P.V of the previous one; see
// flash_fwd_ws_kernel.cuh), and wgmma_ws_pingpong (the same with the two
// consumer warpgroups taking turns on the tensor cores), selectable until
// measured faster.
// automatic: wgmma_ws (warp-specialised, TMA-fed; 2.1x wgmma on the H200,
// docs/perf-log.md) when its tensor maps can be built for the tensors, else
// wgmma (same contract, no TMA requirements: e.g. a varlen batch with no keys).
enum class FlashKernel : int32_t {
  wgmma = 0,
  mma_sync = 1,
  wgmma_ws = 2,
  wgmma_ws_pingpong = 3,
  automatic = 4
};

struct FlashFwdParams {
  FlashKernel kernel = FlashKernel::automatic;
  // q [T, h, 192] bf16; the 192 dims of a (token, head) are contiguous.
  const void* q = nullptr;
  int64_t q_row_stride = 0, q_head_stride = 0;  // elements
  // Keys are read as two parts so that k_rope, shared by all heads in MLA,
  // need not be copied h times: k_nope [Tk, h, 128] and k_rope [Tk, h|1, 64].
  // k_rope_head_stride 0 means one rope vector per token for every head. A
  // caller holding a full k [Tk, h, 192] passes k_rope = k + 128, same strides.
  const void* k_nope = nullptr;
  int64_t k_nope_row_stride = 0, k_nope_head_stride = 0;
  const void* k_rope = nullptr;
  int64_t k_rope_row_stride = 0, k_rope_head_stride = 0;
  const void* v = nullptr;  // [Tk, h, 128] bf16
  int64_t v_row_stride = 0, v_head_stride = 0;
  void* out = nullptr;  // [T, h, 128] bf16 or f32 (out_f32)
  int64_t out_row_stride = 0, out_head_stride = 0;
  bool out_f32 = false;
  float* lse = nullptr;  // [h, T] f32, natural log; may be null
  int64_t lse_head_stride = 0, lse_row_stride = 1;
  // [B + 1] device offsets. Null means one sequence (batch 1) of
  // max_seqlen_q queries and seqlen_k keys: the chunked path uses this.
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  int32_t seqlen_k = 0;
  int32_t batch = 0;
  int32_t heads = 0;
  int32_t max_seqlen_q = 0;  // sizes the grid; sequences shorter exit early
  // Rows of the q and k/v tensors (cu_seqlens_q[B], cu_seqlens_k[B]): the
  // bounds of wgmma_ws's tensor maps. 0 with null cu_seqlens means
  // max_seqlen_q / seqlen_k; with cu_seqlens they must be given for wgmma_ws.
  int64_t total_q = 0, total_k = 0;
  float softmax_scale = 0.f;
  // Causal, bottom-right aligned: query i of a sequence with Tq queries and Tk
  // keys sees keys j <= i + (Tk - Tq). A query seeing no key gets out 0, lse -inf.
  bool causal = true;
  // Added to the diagonal: query i sees keys j <= i + (Tk - Tq) + causal_shift.
  // A key chunk [s0, s1) of a cache of L tokens whose last Tq are the queries
  // uses L - s1, so that every chunk applies the mask of the whole sequence.
  int32_t causal_shift = 0;
};

}  // namespace mla::cuda::prefill
