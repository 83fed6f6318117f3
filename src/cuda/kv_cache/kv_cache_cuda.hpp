// CUDA backend of mla::append_kv (include/mla/kv_cache.hpp): writes T new
// tokens into the paged latent cache, rounding to bf16 or quantising to the
// 656-byte fp8_ds_mla entry; the bytes equal the CPU reference's
// (src/reference/fp8_quant.*) exactly.
//
// Called by src/api/kv_cache.cpp after the device-independent validation. The
// slots live on the GPU and are not read on the host: a slot of -1 skips its
// token (padding), and any other slot outside [0, num_pages * page_size) is
// skipped too (never written): the kernel cannot report it synchronously.
#pragma once
#include "mla/kv_cache.hpp"

namespace mla::cuda {
Status append_kv(const AppendKvArgs& args, const ExecContext& ctx);
}  // namespace mla::cuda
