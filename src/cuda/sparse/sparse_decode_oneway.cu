// Instantiations of the main decode kernel's one-way math form
// (decode_kernel.cuh) with the Indexed key source (sparse decode), for the
// bf16, fp8_ds_mla and fp8_e4m3 caches.
#include "cuda/decode/decode_kernel.cuh"

namespace mla::cuda::decode {

template cudaError_t launch_decode_kernel<IndexedKeys, KvFormat::bf16, false, MathForm::oneway>(
    const DecodeParams&, int, cudaStream_t, const CUtensorMap&);
template cudaError_t launch_decode_kernel<IndexedKeys, KvFormat::fp8_ds_mla, false,
                                          MathForm::oneway>(const DecodeParams&, int, cudaStream_t,
                                                            const CUtensorMap&);
template cudaError_t launch_decode_kernel<IndexedKeys, KvFormat::fp8_e4m3, false, MathForm::oneway>(
    const DecodeParams&, int, cudaStream_t, const CUtensorMap&);

}  // namespace mla::cuda::decode
