// Instantiations of the main decode kernel's one-way math form with the fp8
// producer's sector-pair loads (kSectorPairs, decode_kernel.cuh) for the
// fp8_ds_mla and fp8_e4m3 paged caches (decode::Kernel::wgmma_fp8_oneway_sp).
#include "cuda/decode/decode_kernel.cuh"

namespace mla::cuda::decode {

template cudaError_t launch_decode_kernel<PagedKeys, KvFormat::fp8_ds_mla, false, MathForm::oneway,
                                          true>(const DecodeParams&, int, cudaStream_t,
                                                const CUtensorMap&);
template cudaError_t launch_decode_kernel<PagedKeys, KvFormat::fp8_e4m3, false, MathForm::oneway,
                                          true>(const DecodeParams&, int, cudaStream_t,
                                                const CUtensorMap&);

}  // namespace mla::cuda::decode
