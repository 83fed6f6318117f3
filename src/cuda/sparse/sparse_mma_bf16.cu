// Instantiations of the mma_sync sparse attention kernel for the bf16 cache.
#include "cuda/sparse/sparse_mma_kernel.cuh"
#include "cuda/sparse/sparse_mma_launch.hpp"

namespace mla::cuda::sparse::mma {

MLA_SPARSE_MMA_INSTANCE(, 16, false)
MLA_SPARSE_MMA_INSTANCE(, 32, false)
MLA_SPARSE_MMA_INSTANCE(, 64, false)

}  // namespace mla::cuda::sparse::mma
