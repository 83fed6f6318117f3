// Instantiation of the main decode kernel with the Indexed key source (sparse
// decode and prefill) for bf16 caches.
#include "cuda/decode/decode_kernel.cuh"

namespace mla::cuda::decode {

template cudaError_t launch_decode_kernel<IndexedKeys, KvFormat::bf16, false, MathForm::seesaw>(
    const DecodeParams&, int, cudaStream_t, const CUtensorMap&);

}  // namespace mla::cuda::decode
