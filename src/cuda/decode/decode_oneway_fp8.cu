// Instantiations of the main decode kernel's one-way math form
// (decode_kernel.cuh) for the fp8_ds_mla and fp8_e4m3 paged caches.
#include "cuda/decode/decode_kernel.cuh"

namespace mla::cuda::decode {

template cudaError_t launch_decode_kernel<PagedKeys, KvFormat::fp8_ds_mla, false, MathForm::oneway>(
    const DecodeParams&, int, cudaStream_t, const CUtensorMap&);
template cudaError_t launch_decode_kernel<PagedKeys, KvFormat::fp8_e4m3, false, MathForm::oneway>(
    const DecodeParams&, int, cudaStream_t, const CUtensorMap&);

}  // namespace mla::cuda::decode
