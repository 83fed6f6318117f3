// Instantiations of the main decode kernel with the narrow math
// (decode_narrow.cuh: row blocks of <= 16 rows; two tiles of raw entries in
// the producer) for both fp8 paged caches.
#include "cuda/decode/decode_kernel.cuh"

namespace mla::cuda::decode {

template cudaError_t launch_decode_kernel<PagedKeys, KvFormat::fp8_ds_mla, false, MathForm::narrow>(
    const DecodeParams&, int, cudaStream_t, const CUtensorMap&);
template cudaError_t launch_decode_kernel<PagedKeys, KvFormat::fp8_e4m3, false, MathForm::narrow>(
    const DecodeParams&, int, cudaStream_t, const CUtensorMap&);

}  // namespace mla::cuda::decode
