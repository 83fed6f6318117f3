// Instantiations of the wgmma decode kernel with the Indexed key source
// (sparse decode, decode_keys.cuh); own file so the two sets compile in parallel.
#include "cuda/decode/decode_wgmma.hpp"
#include "cuda/decode/decode_wgmma_kernel.cuh"

namespace mla::cuda::decode {

cudaError_t launch_decode_main_wgmma_indexed(const DecodeParams& p, bool fp8, int row_blocks,
                                             cudaStream_t stream, bool fp8_prefetch) {
  using v4::launch_wgmma;
  const CUtensorMap none{};  // no TMA on indexed keys
  if (!fp8) return launch_wgmma<false, v4::kV4, IndexedKeys>(p, row_blocks, stream, none);
  return fp8_prefetch ? launch_wgmma<true, v4::kV6, IndexedKeys>(p, row_blocks, stream, none)
                      : launch_wgmma<true, v4::kV4, IndexedKeys>(p, row_blocks, stream, none);
}

}  // namespace mla::cuda::decode
