// Raw launch of the prefill attention kernel (no validation; see flash_fwd.hpp).
#pragma once
#include <cuda_runtime.h>

#include "cuda/prefill/flash_fwd_params.hpp"

namespace mla::cuda::prefill {
cudaError_t flash_fwd_launch_raw(const FlashFwdParams& p, cudaStream_t stream);
}  // namespace mla::cuda::prefill
