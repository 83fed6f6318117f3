// Parameters of the causal flash-attention forward kernel (non-absorbed MLA
// prefill: d_qk 192 = 128 nope + 64 rope, d_v 128). Plain data, host-visible,
// so that the launcher and the tests can fill it without CUDA headers.
#pragma once
#include <cstdint>

namespace mla::cuda::prefill {

// The prefill attention kernels (one CTA = 128 queries of one sequence and head):
//   tma_warp_specialized  one producer thread issues TMA loads into a ring of
//                         128-key tiles, two consumer warpgroups run wgmma and
//                         the softmax, S of tile j overlapping P.V of j - 1
//                         (flash_fwd_ws_kernel.cuh). Needs TMA maps of q, k_nope,
//                         k_rope and v (encode_flash_ws_maps).
//   cp_async_wgmma        every thread copies 64-key tiles by cp.async, two
//                         warpgroups of wgmma (flash_fwd_wgmma_kernel.cuh); no
//                         layout demand beyond 16-byte rows.
enum class Kernel : int32_t { tma_warp_specialized, cp_async_wgmma };
inline constexpr Kernel kAllKernels[] = {Kernel::tma_warp_specialized, Kernel::cp_async_wgmma};
inline const char* kernel_name(Kernel k) {
  return k == Kernel::tma_warp_specialized ? "tma_warp_specialized" : "cp_async_wgmma";
}

struct FlashFwdParams {
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
  // bounds of the TMA maps. 0 with null cu_seqlens means max_seqlen_q /
  // seqlen_k; with cu_seqlens they must be given for tma_warp_specialized.
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
