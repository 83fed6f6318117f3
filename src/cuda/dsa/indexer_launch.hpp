// Kernel-level interface of the lightning-indexer kernels (raw pointers, POD
// params): the API wrappers in indexer_cuda.cpp fill these after validation,
// and the GPU tests and the benchmark call them directly.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "mla/status.hpp"

namespace mla::cuda::dsa {

inline constexpr int kIndexerHeads = 64;  // H_I
inline constexpr int kIndexerDim = 128;   // d_I

// The paged indexer key cache: each page holds page_size x 128 e4m3 codes,
// then page_size fp32 scales (DESIGN.md section 2; 8448 B for a page of 64).
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
//   [0, seqlens[b] - (s_q - 1 - i)) of request b through block_table. Any s_q
//   >= 1 on the wgmma kernel (chunks of 4); 1 to 4 on the mma.sync one.
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
  // Token chunks (set by the wgmma launcher, which runs s_q > 4 as chunks of at
  // most 4 new tokens): request b's tokens are rows b * tokens_per_request + i,
  // this launch covers i in [token_begin, token_begin + s_q), and token i's
  // causal limit counts the tokens after it in the whole request.
  // tokens_per_request 0 means s_q (one launch, token_begin 0).
  int tokens_per_request = 0;
  int token_begin = 0;
  const int32_t* seqlens = nullptr;
  const int32_t* block_table = nullptr;
  int64_t block_table_stride = 0;
  IndexerCachePtr cache;
  // prefill
  const uint8_t* flat_keys = nullptr;
  const float* flat_scales = nullptr;
  int64_t num_keys = 0;
  const int32_t* ks = nullptr;
  const int32_t* ke = nullptr;
  // Decode kernel choice: the wgmma kernel (default) or the first mma.sync one,
  // kept so the benchmark and the tests can compare the two in one run.
  bool decode_mma_sync = false;
  // Benchmark-only timing variants of the wgmma decode (bench_dsa sets them to
  // place the time; those that stop early do NOT write the logits): 0 = the
  // real kernel; 1 = the page copies alone (no wgmma, no epilogue); 2 = copies
  // and wgmma (no epilogue, no stores).
  int timing_variant = 0;
  // Which wgmma decode kernel: 0 = as MLA_INDEXER_KERNEL says (v2 unless it is
  // "v1"), 1 = v1 (indexer_decode_wgmma.cu: cp.async from every thread, heads
  // reduced through shared memory), 2 = v2 (indexer_decode_tma.cu: TMA page
  // copies from one thread into a deeper ring, heads reduced in registers).
  // v2 falls back to v1 where the cache's TMA map cannot be built, and the
  // timing variants above are v1's.
  int decode_version = 0;
  // Benchmark-only: v2's ring depth at s_q 1 (0: its default, 5 stages and 4
  // CTAs per SM; 3: 3 stages, 6 CTAs per SM). Other values mean the default.
  int v2_stages = 0;
};
Status launch_indexer_logits_decode(const IndexerLogitsParams& p, cudaStream_t stream);
// The wgmma form of the decode (indexer_decode_wgmma.cu); the entry above
// dispatches to it unless p.decode_mma_sync.
Status launch_indexer_logits_decode_wgmma(const IndexerLogitsParams& p, cudaStream_t stream);
// v2 chosen for p (decode_version, MLA_INDEXER_KERNEL, no timing variant).
bool indexer_decode_v2_chosen(const IndexerLogitsParams& p);
// The v2 decode; *taken is false (and nothing launched) when the TMA map of
// the cache cannot be built.
Status launch_indexer_logits_decode_tma(const IndexerLogitsParams& p, cudaStream_t stream,
                                        bool* taken);
Status launch_indexer_logits_prefill(const IndexerLogitsParams& p, cudaStream_t stream);

}  // namespace mla::cuda::dsa
