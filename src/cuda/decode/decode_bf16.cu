// Instantiations of the main decode kernel for the bf16 paged cache: tiles by
// cp.async, and full tiles by TMA.
#include "cuda/decode/decode_kernel.cuh"

namespace mla::cuda::decode {

template cudaError_t launch_decode_kernel<PagedKeys, KvFormat::bf16, false, MathForm::seesaw>(
    const DecodeParams&, int, cudaStream_t, const CUtensorMap&);
template cudaError_t launch_decode_kernel<PagedKeys, KvFormat::bf16, true, MathForm::seesaw>(
    const DecodeParams&, int, cudaStream_t, const CUtensorMap&);

}  // namespace mla::cuda::decode
