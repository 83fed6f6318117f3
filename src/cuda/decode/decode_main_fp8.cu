// Instantiations of the main decode kernel for the fp8_ds_mla cache.
#include "cuda/decode/decode_kernel.cuh"

namespace mla::cuda::decode {

cudaError_t launch_main_fp8(const DecodeParams& p, int row_tiles, int row_blocks,
                            cudaStream_t stream) {
  switch (row_tiles) {
    case 1: return launch_main_t<1, true>(p, row_blocks, stream);
    case 2: return launch_main_t<2, true>(p, row_blocks, stream);
    case 4: return launch_main_t<4, true>(p, row_blocks, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace mla::cuda::decode
