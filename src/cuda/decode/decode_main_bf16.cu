// Instantiations of the main decode kernel for the bf16 cache, and the
// launcher that picks the instantiation (fp8 ones live in decode_main_fp8.cu
// so the two compile in parallel).
#include "cuda/decode/decode_kernel.cuh"

namespace mla::cuda::decode {

int row_tiles_for(int rows) {
  return rows <= 16 ? 1 : rows <= 32 ? 2 : 4;
}

size_t main_kernel_smem_bytes(int row_tiles, bool fp8) {
  switch (row_tiles * 2 + (fp8 ? 1 : 0)) {
    case 2: return MainShape<1, false>::kSmemBytes;
    case 3: return MainShape<1, true>::kSmemBytes;
    case 4: return MainShape<2, false>::kSmemBytes;
    case 5: return MainShape<2, true>::kSmemBytes;
    case 8: return MainShape<4, false>::kSmemBytes;
    case 9: return MainShape<4, true>::kSmemBytes;
  }
  return 0;
}

cudaError_t launch_decode_main(const DecodeParams& p, int row_tiles, bool fp8, int row_blocks,
                               cudaStream_t stream) {
  if (fp8) return launch_main_fp8(p, row_tiles, row_blocks, stream);
  switch (row_tiles) {
    case 1: return launch_main_t<1, false>(p, row_blocks, stream);
    case 2: return launch_main_t<2, false>(p, row_blocks, stream);
    case 4: return launch_main_t<4, false>(p, row_blocks, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace mla::cuda::decode
