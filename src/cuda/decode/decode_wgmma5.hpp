// Launcher of the "v5" main decode kernel (decode_wgmma5_kernel.cuh): the v4
// wgmma kernel with P.V(j) and S(j+1) issued back to back. Same grid, shared
// memory, schedule, params and workspace as v4 (decode_wgmma.hpp).
#pragma once
#include <cuda_runtime.h>

#include "cuda/decode/decode_traits.hpp"

namespace mla::cuda::decode {

cudaError_t launch_decode_main_wgmma5(const DecodeParams& p, bool fp8, int row_blocks,
                                      cudaStream_t stream);

}  // namespace mla::cuda::decode
