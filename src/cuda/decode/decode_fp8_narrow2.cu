// Instantiations of the main decode kernel with the narrow math and two tiles
// of raw entries in the producer's registers (decode_kernel.cuh, kNarrow = 2)
// for both fp8 paged caches.
#include "cuda/decode/decode_kernel.cuh"

namespace mla::cuda::decode {

template cudaError_t launch_decode_kernel<PagedKeys, KvFormat::fp8_ds_mla, false, 2>(
    const DecodeParams&, int, cudaStream_t, const CUtensorMap&);
template cudaError_t launch_decode_kernel<PagedKeys, KvFormat::fp8_e4m3, false, 2>(
    const DecodeParams&, int, cudaStream_t, const CUtensorMap&);

}  // namespace mla::cuda::decode
