// Launcher of the prefill flash-attention kernel (flash_fwd_kernel.cuh).
#pragma once
#include "cuda/prefill/flash_fwd_params.hpp"
#include "mla/status.hpp"

namespace mla::cuda::prefill {

// Arguments are assumed validated (src/api does that for the public entry
// points); this only checks what the launch itself needs.
Status launch_flash_fwd(const FlashFwdParams& p, void* stream);

}  // namespace mla::cuda::prefill
