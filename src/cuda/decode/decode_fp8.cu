// Instantiation of the main decode kernel for the fp8_ds_mla paged cache.
#include "cuda/decode/decode_kernel.cuh"

namespace mla::cuda::decode {

template cudaError_t launch_decode_kernel<PagedKeys, KvFormat::fp8_ds_mla, false, MathForm::seesaw>(
    const DecodeParams&, int, cudaStream_t, const CUtensorMap&);

}  // namespace mla::cuda::decode
