// Launcher of the wgmma main decode kernel (decode_wgmma_kernel.cuh, "v4").
// It runs on the same schedule, params and workspace as the mma.sync kernel
// (grid (p.num_workers, row_blocks) with row_blocks = ceil(rows / 64)).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "cuda/decode/decode_traits.hpp"

namespace mla::cuda::decode {

inline constexpr int kWgmmaRows = 64;  // query rows per CTA of the wgmma kernel
size_t wgmma_kernel_smem_bytes();
// fp8_prefetch (fp8 caches only): the producer keeps the next tile's loads
// in flight ("v6", produce_fp8_prefetch); false: v4's producer.
cudaError_t launch_decode_main_wgmma(const DecodeParams& p, bool fp8, int row_blocks,
                                     cudaStream_t stream, bool fp8_prefetch);
// The same kernel with the Indexed key source (sparse decode): p carries
// tokens_per_batch > 0, indices, num_slots and token_len (decode_traits.hpp).
cudaError_t launch_decode_main_wgmma_indexed(const DecodeParams& p, bool fp8, int row_blocks,
                                             cudaStream_t stream, bool fp8_prefetch);

}  // namespace mla::cuda::decode
