// Raw launch of the prefill attention kernel (no validation; see flash_fwd.hpp).
#pragma once
#include <cuda_runtime.h>

#include "cuda/prefill/flash_fwd_params.hpp"
#include "cuda/prefill/flash_fwd_ws_maps.hpp"

namespace mla::cuda::prefill {
// `maps` is used by FlashKernel::wgmma_ws only (null there: invalid value).
cudaError_t flash_fwd_launch_raw(const FlashFwdParams& p, const FlashWsMaps* maps,
                                 cudaStream_t stream);
}  // namespace mla::cuda::prefill
