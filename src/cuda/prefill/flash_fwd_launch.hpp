// Raw launches of the prefill attention kernels, one per prefill::Kernel (no
// validation; see flash_fwd.hpp). CUDA errors come back as they are.
#pragma once
#include <cuda_runtime.h>

#include "cuda/prefill/flash_fwd_params.hpp"
#include "cuda/prefill/flash_fwd_ws_maps.hpp"

namespace mla::cuda::prefill {
// Kernel::tma_warp_specialized; `maps` encoded for p (encode_flash_ws_maps).
cudaError_t launch_flash_fwd_tma(const FlashFwdParams& p, const FlashWsMaps& maps,
                                 cudaStream_t stream);
// Kernel::cp_async_wgmma.
cudaError_t launch_flash_fwd_cp_async(const FlashFwdParams& p, cudaStream_t stream);
}  // namespace mla::cuda::prefill
