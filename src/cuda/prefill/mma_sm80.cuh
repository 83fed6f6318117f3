// The warp-level tensor-core instructions of the mma.sync prefill kernel (sm_80
// instructions, run on Hopper). ldmatrix, the bf16 m16n8k16 MMA, the bf16x2
// packing and cp.async are the common wrappers (cuda/common/ptx.cuh: same PTX,
// same operand order). Written out rather than taken from CUTLASS so that the
// prefill kernels build with the toolkit alone (CI has two cores; CuTe's
// templates cost minutes per translation unit).
#pragma once
#include <cstdint>

#include "cuda/common/ptx.cuh"

namespace mla::cuda::prefill {

using ptx::ldmatrix_x4;
using ptx::ldmatrix_x4_trans;
using ptx::mma_bf16_16816;
using ptx::pack_bf16x2;
using ptx::smem_addr;

// cp.async: the wrappers without the "memory" clobber (ptx::noclobber): the
// prefill kernels order copies against ordinary shared accesses only through
// the __syncthreads after cp_async_wait, and address shared memory by 32-bit
// shared-window offsets (the wgmma kernel computes its swizzled tile addresses
// that way).
using ptx::noclobber::cp_async_16;
using ptx::noclobber::cp_async_commit;
using ptx::noclobber::cp_async_wait;

}  // namespace mla::cuda::prefill
