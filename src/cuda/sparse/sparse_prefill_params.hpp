// Parameters of the sparse prefill kernel (DSA attention of prompt tokens,
// sparse_prefill_kernel.cuh). Plain data, host-visible, no CUDA headers.
//
// Query token i (q [s_q, h_q, 576] bf16) attends to the key rows
// indices[i][0 .. n_i) of kv (bf16 rows [s_kv, 576], or with fp8 the 656-byte
// fp8_ds_mla entries [s_kv, 656], dequantised as they are gathered: e4m3 x
// the power-of-two scale of each 128 latent values, exact in bf16; the rope
// part is bf16), n_i = topk_length ?
// clamp(topk_length[i], 0, topk) : topk. The value of a key is the first 512
// columns of its row. An entry that is -1, negative or >= s_kv is skipped and
// never read; duplicates count as often as they appear. A token with no valid
// entry gets out 0 and lse -inf. The chunked prefill of an engine (queries of
// one chunk selecting among the cached prefix and the chunk's own keys) is the
// same call with kv = prefix + chunk rows and indices into that array.
#pragma once
#include <cstdint>

namespace mla::cuda::sparse {

struct SparsePrefillParams {
  const void* q = nullptr;       // bf16
  int64_t q_ss = 0, q_sh = 576;  // elements; rows of 576 contiguous
  int s_q = 0, h_q = 0;
  const int32_t* indices = nullptr;
  int64_t idx_ss = 0;  // elements; entries of a token contiguous
  int topk = 0;
  const int32_t* topk_length = nullptr;  // optional [s_q]
  const void* kv = nullptr;              // bf16 rows, or fp8_ds_mla entries when fp8
  bool fp8 = false;
  int64_t kv_row_stride = 576;  // elements of kv (bf16, or bytes when fp8)
  int64_t s_kv = 0;
  float softmax_scale = 0.f;
  void* out = nullptr;               // bf16
  int64_t out_ss = 0, out_sh = 512;  // elements; rows of 512 contiguous
  float* lse = nullptr;              // natural log
  int64_t lse_ss = 0, lse_sh = 1;
  // Persistent CTAs: at most this many (0: one per SM). The result does not
  // depend on it (an item's arithmetic is the same in any CTA); tests use a
  // few CTAs to run many items through one CTA's ring.
  int max_ctas = 0;
};

}  // namespace mla::cuda::sparse
