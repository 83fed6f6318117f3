// Instantiations of the mma_sync sparse attention kernel for the fp8 cache.
#include "cuda/sparse/sparse_mma_kernel.cuh"
#include "cuda/sparse/sparse_mma_launch.hpp"

namespace mla::cuda::sparse::mma {

MLA_SPARSE_MMA_INSTANCE(, 16, true)
MLA_SPARSE_MMA_INSTANCE(, 32, true)
MLA_SPARSE_MMA_INSTANCE(, 64, true)

}  // namespace mla::cuda::sparse::mma
