// CUDA backend of the non-absorbed prefill ops (include/mla/prefill.hpp),
// called by src/api/prefill.cpp after its device-independent validation, plus
// the chunked prefill over a paged cache (chunked_prefill.hpp).
#pragma once
#include "cuda/prefill/chunked_prefill.hpp"
#include "mla/prefill.hpp"

namespace mla::cuda {

// bf16 only; d_nope/d_v 128, d_c 512 (DeepSeek); the heads of a token row of
// k_nope and v must be dense (stride(1) == 128): one GEMM writes all heads.
Status decompress_kv(const DecompressKvArgs& args, const ExecContext& ctx);

// bf16 q/k/v with d_qk 192, d_v 128; out bf16 or f32; lse f32 [h, T].
// cu_seqlens are read back to the host once (checked like the CPU path's, and
// the grid is sized from the longest sequence): a stream sync per call.
Status mha_prefill(const MhaPrefillArgs& args, const ExecContext& ctx);

}  // namespace mla::cuda
