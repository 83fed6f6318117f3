// Instantiations of the main decode kernel's one-way math form
// (decode_kernel.cuh) for the bf16 paged cache: tiles by cp.async, and full
// tiles by TMA.
#include "cuda/decode/decode_kernel.cuh"

namespace mla::cuda::decode {

template cudaError_t launch_decode_kernel<PagedKeys, KvFormat::bf16, false, MathForm::oneway>(
    const DecodeParams&, int, cudaStream_t, const CUtensorMap&);
template cudaError_t launch_decode_kernel<PagedKeys, KvFormat::bf16, true, MathForm::oneway>(
    const DecodeParams&, int, cudaStream_t, const CUtensorMap&);

}  // namespace mla::cuda::decode
