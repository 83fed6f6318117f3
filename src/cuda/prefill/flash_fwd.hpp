// Launcher of the prefill flash-attention kernel (flash_fwd_kernel.cuh).
#pragma once
#include "cuda/prefill/flash_fwd_params.hpp"
#include "mla/status.hpp"

namespace mla::cuda::prefill {

// Arguments are assumed validated (src/api does that for the public entry
// points); this only checks what the launch itself needs.
Status launch_flash_fwd(const FlashFwdParams& p, void* stream);

// The kernel of the library's own prefill paths (mha_prefill, chunked
// prefill): FlashKernel::automatic unless the environment variable
// MLA_PREFILL_KERNEL names one (wgmma, wgmma_ws, wgmma_ws_pingpong, mma_sync),
// so that the GPU tests and benches can force a variant. Read once per process.
FlashKernel default_flash_kernel();

}  // namespace mla::cuda::prefill
