// Instantiation of the main decode kernel with the Indexed key source (sparse
// decode) for the fp8_e4m3 (vLLM) cache.
#include "cuda/decode/decode_kernel.cuh"

namespace mla::cuda::decode {

template cudaError_t launch_decode_kernel<IndexedKeys, KvFormat::fp8_e4m3, false, MathForm::seesaw>(
    const DecodeParams&, int, cudaStream_t, const CUtensorMap&);

}  // namespace mla::cuda::decode
