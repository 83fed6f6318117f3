// Kernel-level interface of the lightning-indexer kernels (raw pointers, POD
// params): the API wrappers in indexer_cuda.cpp fill these after validation,
// and the GPU tests and the benchmark call them directly.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <optional>

#include "mla/indexer.hpp"
#include "mla/status.hpp"

namespace mla::cuda::indexer {

// The paged indexer key cache: each page holds page_size x 128 e4m3 codes,
// then page_size fp32 scales (mla/indexer.hpp; 8448 B for a page of 64).
struct IndexerCachePtr {
  uint8_t* base = nullptr;
  int64_t page_stride = 0;  // bytes between pages (>= page_size * 132)
  int page_size = 64;
  int64_t num_pages = 0;
};

// Quantise T keys [T, 128] (f32 or bf16 by `key_is_bf16`) into the cache at
// global slots (i64, -1 skips the token; a slot past the cache is skipped too,
// the API rejects it first where it can read the slots).
struct IndexerAppendParams {
  const void* keys = nullptr;
  bool key_is_bf16 = false;
  int64_t key_row_stride = 128;  // elements
  const int64_t* slots = nullptr;
  int64_t num_tokens = 0;
  IndexerCachePtr cache;
};
Status launch_indexer_append(const IndexerAppendParams& p, cudaStream_t stream);

// Quantise queries [rows, 64, 128] (f32/bf16) to q8 e4m3 and fold each
// (row, head) scale into its weight: w' = w * 64^-0.5 * 128^-0.5 * s.
struct IndexerQueryParams {
  const void* q = nullptr;
  bool q_is_bf16 = false;
  int64_t q_row_stride = 0, q_head_stride = 128;  // elements
  const float* weights = nullptr;
  int64_t w_row_stride = 64;
  uint8_t* q8 = nullptr;
  int64_t q8_row_stride = 0, q8_head_stride = 128;
  float* w_folded = nullptr;
  int64_t wf_row_stride = 64;
  int64_t rows = 0;
};
Status launch_indexer_query(const IndexerQueryParams& p, cudaStream_t stream);

// I[t, s] = k_scale[s] * sum_h w[t, h] * ReLU(q8[t, h] . k8[s]) for keys s in the
// query's range [lo_t, hi_t), -inf for the other columns in [0, width).
//   q      [num_tokens, 64, 128] e4m3 (heads and dims dense), token stride q_stride bytes
//   w      [num_tokens, 64] f32 (query scale and 64^-0.5 * 128^-0.5 folded in)
//   logits [num_tokens, width] f32, row stride logits_stride elements
// Decode (paged):  tokens are [B, s_q] flattened, token (b, i) sees keys
//   [0, seqlens[b] - (s_q - 1 - i)) of request b through block_table; any s_q >= 1.
// Prefill (flat):  keys [num_keys, 128] e4m3 + scales [num_keys] f32; token t
//   sees [ks[t], ke[t]).
struct IndexerLogitsParams {
  const uint8_t* q = nullptr;
  int64_t q_stride = kIndexerHeads * kIndexerDim;
  const float* w = nullptr;
  int64_t w_stride = kIndexerHeads;
  float* logits = nullptr;
  int64_t logits_stride = 0;
  int64_t width = 0;
  int64_t num_tokens = 0;
  // decode
  int batch = 0;
  int s_q = 1;
  // Token chunks (set by the decode launcher, which runs s_q > 4 as chunks of
  // at most 4 new tokens): request b's tokens are rows b * tokens_per_request
  // + i, this launch covers i in [token_begin, token_begin + s_q), and token
  // i's causal limit counts the tokens after it in the whole request.
  // tokens_per_request 0 means s_q (one launch, token_begin 0).
  int tokens_per_request = 0;
  int token_begin = 0;
  const int32_t* seqlens = nullptr;
  const int32_t* block_table = nullptr;
  int64_t block_table_stride = 0;
  // Columns of block_table: a length past max_pages * 64 (which the host
  // cannot see) has no keys past the table's row: -inf there, never read on.
  int64_t max_pages = INT64_MAX;
  IndexerCachePtr cache;
  // prefill
  const uint8_t* flat_keys = nullptr;
  const float* flat_scales = nullptr;
  int64_t num_keys = 0;
  const int32_t* ks = nullptr;
  const int32_t* ke = nullptr;
  // The form: decode (keys in the paged cache) or prefill (flat keys).
  bool paged = false;
};

// The indexer's logits kernels, one per form of the keys:
//   paged_tma_wgmma  decode form (paged cache): a CTA walks a run of pages of one
//                    request, one thread issuing each page as a TMA box into a
//                    ring, FP8 wgmma with the keys as the A operand, the heads
//                    reduced in registers (indexer_decode.cu).
//   flat_tma_wgmma   prefill form (flat keys with per-query ranges): a CTA owns 8
//                    queries and a chunk of keys, a producer thread streams
//                    64-key TMA boxes into a ring, two consumer warpgroups each
//                    run m64n256k32 e4m3 wgmmas for 4 queries, taking turns on
//                    the tensor cores (indexer_prefill_wgmma.cu).
enum class Kernel { paged_tma_wgmma, flat_tma_wgmma };
inline constexpr Kernel kAllKernels[] = {Kernel::paged_tma_wgmma, Kernel::flat_tma_wgmma};
inline const char* kernel_name(Kernel k) {
  return k == Kernel::paged_tma_wgmma ? "paged_tma_wgmma" : "flat_tma_wgmma";
}
// Whether kernel k reads the paged cache (decode form) or flat keys (prefill).
inline bool serves_paged(Kernel k) {
  return k == Kernel::paged_tma_wgmma;
}

// The kernel for a problem: the form of its keys decides it.
inline Kernel choose_kernel(const IndexerLogitsParams& p) {
  return p.paged ? Kernel::paged_tma_wgmma : Kernel::flat_tma_wgmma;
}

// Internal options of the logits launch (the public API never sets them).
struct LogitsOptions {
  // The kernel to run; unset: choose_kernel(p). Errc::unsupported names a
  // kernel that does not serve p's form of the keys.
  std::optional<Kernel> kernel;
  // Pages per CTA of the paged kernel; 0 sizes the runs from the problem. The
  // tests set a few pages so that short requests wrap the ring of stages.
  int pages_per_cta = 0;
  // Keys per CTA of flat_tma_wgmma (rounded up to its 64-key tile); 0 sizes
  // the chunks from the problem. The tests set a few tiles so that CTAs split
  // the columns and meet ranges that start or end inside their chunk.
  int64_t keys_per_cta = 0;
};
Status launch_indexer_logits(const IndexerLogitsParams& p, cudaStream_t stream,
                             const LogitsOptions& opt = {});

// The kernels behind launch_indexer_logits.
Status launch_indexer_logits_paged(const IndexerLogitsParams& p, cudaStream_t stream,
                                   const LogitsOptions& opt);
Status launch_indexer_logits_flat_wgmma(const IndexerLogitsParams& p, cudaStream_t stream,
                                        const LogitsOptions& opt);

}  // namespace mla::cuda::indexer
