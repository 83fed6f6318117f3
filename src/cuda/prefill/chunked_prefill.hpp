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
#include "mla/prefill.hpp"
#include "mla/status.hpp"
#include "mla/tensor.hpp"

namespace mla::cuda {

using mla::ChunkedPrefillArgs;  // the public arguments (mla/prefill.hpp)

Status chunked_prefill_workspace_size(const ChunkedPrefillArgs& args, size_t* bytes);
// `kernel` (internal: the tests set it) forces the attention kernel of every
// chunk; unset, prefill::choose_kernel picks it.
Status chunked_prefill(const ChunkedPrefillArgs& args, Workspace ws, const ExecContext& ctx,
                       std::optional<prefill::Kernel> kernel = std::nullopt);

}  // namespace mla::cuda
