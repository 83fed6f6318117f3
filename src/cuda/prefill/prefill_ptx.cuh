// The PTX wrappers the prefill kernels use, from cuda/common/ptx.cuh (written
// out rather than taken from CUTLASS so that the kernels build with the
// toolkit alone: CuTe's templates cost minutes per translation unit).
#pragma once
#include <cstdint>

#include "cuda/common/ptx.cuh"

namespace mla::cuda::prefill {

using ptx::pack_bf16x2;
using ptx::smem_addr;

// cp.async: the wrappers without the "memory" clobber (ptx::noclobber): the
// cp.async kernel orders copies against ordinary shared accesses only through
// the __syncthreads after cp_async_wait, and addresses shared memory by 32-bit
// shared-window offsets (it computes its swizzled tile addresses that way).
using ptx::noclobber::cp_async_16;
using ptx::noclobber::cp_async_commit;
using ptx::noclobber::cp_async_wait;

}  // namespace mla::cuda::prefill
