// Instantiations and launcher of the v9 decode kernel (decode_pair_kernel.cuh);
// own file so it compiles beside the v4-v8 set. The stamped form is built in
// every build (unlike v4-v8's, MLA_DECODE_STAMPS): v9 is new, and its phase
// cycles are what the next step is chosen from; it only runs when forced.
#include "cuda/decode/decode_pair_kernel.cuh"
#include "cuda/decode/decode_wgmma.hpp"

namespace mla::cuda::decode {

cudaError_t launch_decode_main_pair(const DecodeParams& p, int row_blocks, cudaStream_t stream,
                                    const CUtensorMap& kv_map, bool chained, bool stamps) {
  if (chained)
    return stamps ? v9::launch_pair<true, true>(p, row_blocks, stream, kv_map)
                  : v9::launch_pair<false, true>(p, row_blocks, stream, kv_map);
  return stamps ? v9::launch_pair<true, false>(p, row_blocks, stream, kv_map)
                : v9::launch_pair<false, false>(p, row_blocks, stream, kv_map);
}

}  // namespace mla::cuda::decode
