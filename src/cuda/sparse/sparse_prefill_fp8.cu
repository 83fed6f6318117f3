// The fp8_ds_mla-key instantiation of the sparse prefill kernel.
#include "cuda/sparse/sparse_prefill_kernel.cuh"

namespace mla::cuda::sparse {

template Status launch_sparse_prefill_as<true>(const SparsePrefillParams&, cudaStream_t);

}  // namespace mla::cuda::sparse
