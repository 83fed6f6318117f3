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
                                     cudaStream_t stream, WgmmaVersion version) {
  using v4::launch_wgmma;
  switch (version) {
#ifdef MLA_DECODE_STAMPS
    // Diagnostics builds only: bf16 with stamps; fp8 runs the unstamped kernel.
    case WgmmaVersion::v4_stamps:
      if (!fp8) {
        return launch_wgmma<false, v4::kV4 | v4::kStamps, PagedKeys>(p, row_blocks, stream);
      }
      return launch_wgmma<true, v4::kV4, PagedKeys>(p, row_blocks, stream);
    case WgmmaVersion::v7_stamps:
      if (!fp8) {
        return launch_wgmma<false, v4::kV7 | v4::kStamps, PagedKeys>(p, row_blocks, stream);
      }
      return launch_wgmma<true, v4::kV6, PagedKeys>(p, row_blocks, stream);
    case WgmmaVersion::v7b_stamps:
      if (!fp8) {
        return launch_wgmma<false, v4::kV7 | v4::kLazyRescale | v4::kStamps, PagedKeys>(
            p, row_blocks, stream);
      }
      return launch_wgmma<true, v4::kV6, PagedKeys>(p, row_blocks, stream);
#else
    case WgmmaVersion::v4_stamps:
    case WgmmaVersion::v7_stamps:
    case WgmmaVersion::v7b_stamps:
      return cudaErrorNotSupported;  // decode_cuda.cpp offers them only with MLA_DECODE_STAMPS
#endif
    case WgmmaVersion::v4:
      return fp8 ? launch_wgmma<true, v4::kV4, PagedKeys>(p, row_blocks, stream)
                 : launch_wgmma<false, v4::kV4, PagedKeys>(p, row_blocks, stream);
    case WgmmaVersion::v6:  // bf16: v4's kernel
      return fp8 ? launch_wgmma<true, v4::kV6, PagedKeys>(p, row_blocks, stream)
                 : launch_wgmma<false, v4::kV4, PagedKeys>(p, row_blocks, stream);
    case WgmmaVersion::v7:  // fp8: v6's kernel
      return fp8 ? launch_wgmma<true, v4::kV6, PagedKeys>(p, row_blocks, stream)
                 : launch_wgmma<false, v4::kV7, PagedKeys>(p, row_blocks, stream);
    case WgmmaVersion::v7b:  // fp8: v6's kernel
      return fp8 ? launch_wgmma<true, v4::kV6, PagedKeys>(p, row_blocks, stream)
                 : launch_wgmma<false, v4::kV7 | v4::kLazyRescale, PagedKeys>(p, row_blocks,
                                                                              stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace mla::cuda::decode
