// Raw launch of the prefill attention kernels (no validation; see flash_fwd.hpp).
#pragma once
#include <cuda_runtime.h>

#include "cuda/prefill/flash_fwd_params.hpp"
#include "cuda/prefill/flash_fwd_ws_maps.hpp"

namespace mla::cuda::prefill {
// `maps` (encoded for p) is read by Kernel::tma_warp_specialized only.
cudaError_t flash_fwd_launch_raw(const FlashFwdParams& p, Kernel kernel, const FlashWsMaps& maps,
                                 cudaStream_t stream);
}  // namespace mla::cuda::prefill
