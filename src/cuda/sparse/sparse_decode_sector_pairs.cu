// Instantiations of the main decode kernel (the seesaw, sparse fp8's
// automatic form) with the Indexed key source and the fp8 producer's
// sector-pair loads (kSectorPairs, decode_kernel.cuh) for the fp8_ds_mla and
// fp8_e4m3 caches (sparse::Kernel::decode_wgmma_sp).
#include "cuda/decode/decode_kernel.cuh"

namespace mla::cuda::decode {

template cudaError_t launch_decode_kernel<IndexedKeys, KvFormat::fp8_ds_mla, false,
                                          MathForm::seesaw, true>(const DecodeParams&, int,
                                                                  cudaStream_t, const CUtensorMap&);
template cudaError_t launch_decode_kernel<IndexedKeys, KvFormat::fp8_e4m3, false, MathForm::seesaw,
                                          true>(const DecodeParams&, int, cudaStream_t,
                                                const CUtensorMap&);

}  // namespace mla::cuda::decode
