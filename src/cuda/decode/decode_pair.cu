// Instantiation and launcher of the v9 decode kernel (decode_pair_kernel.cuh);
// own file so it compiles beside the v4-v8 set.
#include "cuda/decode/decode_pair_kernel.cuh"
#include "cuda/decode/decode_wgmma.hpp"

namespace mla::cuda::decode {

cudaError_t launch_decode_main_pair(const DecodeParams& p, int row_blocks, cudaStream_t stream,
                                    const CUtensorMap& kv_map) {
  return v9::launch_pair(p, row_blocks, stream, kv_map);
}

}  // namespace mla::cuda::decode
