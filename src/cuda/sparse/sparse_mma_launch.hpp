// Launcher of one instantiation of the mma_sync sparse attention kernel
// (sparse_mma_kernel.cuh): HB heads per CTA (16, 32, 64) and the cache type.
// Instantiated in sparse_mma_bf16.cu and sparse_mma_fp8.cu; called by
// launch_sparse_mma (sparse_mma.cu).
#pragma once
#include <cuda_runtime.h>

#include "cuda/sparse/sparse_params.hpp"

namespace mla::cuda::sparse::mma {

template <int HB, bool kFp8>
Status launch_kernel(const SparseAttnParams& p, int splits, float* part_o, float* part_lse,
                     cudaStream_t stream);

#define MLA_SPARSE_MMA_INSTANCE(EXTERN, HB, FP8)                                              \
  EXTERN template Status launch_kernel<HB, FP8>(const SparseAttnParams&, int, float*, float*, \
                                                cudaStream_t);
MLA_SPARSE_MMA_INSTANCE(extern, 16, false)
MLA_SPARSE_MMA_INSTANCE(extern, 32, false)
MLA_SPARSE_MMA_INSTANCE(extern, 64, false)
MLA_SPARSE_MMA_INSTANCE(extern, 16, true)
MLA_SPARSE_MMA_INSTANCE(extern, 32, true)
MLA_SPARSE_MMA_INSTANCE(extern, 64, true)

}  // namespace mla::cuda::sparse::mma
