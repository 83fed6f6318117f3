// Instantiations (bf16 and fp8 caches) and the launcher of the wgmma kernel,
// paged keys (dense decode; the indexed ones are in decode_wgmma_indexed.cu).
#include "cuda/decode/decode_wgmma.hpp"
#include "cuda/decode/decode_wgmma_kernel.cuh"

namespace mla::cuda::decode {

static_assert(kWgmmaRows == v4::kM, "one constant for the launcher and the kernel");

size_t wgmma_kernel_smem_bytes() {
  return v4::kSmemBytes;
}

cudaError_t launch_decode_main_wgmma(const DecodeParams& p, bool fp8, int row_blocks,
                                     cudaStream_t stream, bool fp8_prefetch) {
  using v4::launch_wgmma;
  if (!fp8) return launch_wgmma<false, false, PagedKeys>(p, row_blocks, stream);
  return fp8_prefetch ? launch_wgmma<true, true, PagedKeys>(p, row_blocks, stream)
                      : launch_wgmma<true, false, PagedKeys>(p, row_blocks, stream);
}

}  // namespace mla::cuda::decode
