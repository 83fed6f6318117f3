// Chunked prefill on the GPU (non-absorbed form): T new tokens, already
// appended to a request's paged latent cache (they are its last T tokens),
// attend to the whole cache. The cache is read in chunks of `chunk_size`
// tokens: each chunk is gathered (fp8 entries dequantised), decompressed to
// per-head k_nope and v with two cuBLAS GEMMs, attended with the causal mask
// of the whole sequence (FlashFwdParams::causal_shift), and merged into the
// running result by log-sum-exp. The result equals attending to everything at
// once; the scratch is bounded by the chunk size, not the context length.
//
// A host-side composition of device kernels (one request per call): the loop
// bounds come from the host value `seqlen`, so no device->host copy is needed.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>

#include "cuda/prefill/flash_fwd_params.hpp"
#include "mla/kv_cache.hpp"
#include "mla/status.hpp"
#include "mla/tensor.hpp"

namespace mla::cuda {

struct ChunkedPrefillArgs {
  TensorView q;            // [T, h, 192] bf16, the request's last T tokens
  KvCacheView cache;       // paged latent cache, bf16 or fp8_ds_mla
  TensorView block_table;  // [max_pages] i32, the request's page ids
  int64_t seqlen = 0;      // L: tokens in the cache for this request, the T new ones included
  TensorView w_uk;         // [h, 128, 512] bf16
  TensorView w_uv;         // [h, 128, 512] bf16
  float softmax_scale = 0.f;
  int64_t chunk_size = 8192;  // cache tokens per decompressed chunk
  TensorView out;             // [T, h, 128] bf16
  TensorView lse;             // [h, T] f32 (natural log), optional
};

Status chunked_prefill_workspace_size(const ChunkedPrefillArgs& args, size_t* bytes);
// `kernel` (internal: the tests set it) forces the attention kernel of every
// chunk; unset, prefill::choose_kernel picks it.
Status chunked_prefill(const ChunkedPrefillArgs& args, Workspace ws, const ExecContext& ctx,
                       std::optional<prefill::Kernel> kernel = std::nullopt);

}  // namespace mla::cuda
