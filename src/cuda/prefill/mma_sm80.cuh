// The warp-level tensor-core instructions of the mma.sync prefill kernel (sm_80
// instructions, run on Hopper). ldmatrix, the bf16 m16n8k16 MMA and the bf16x2
// packing are the common wrappers (cuda/common/ptx.cuh: same PTX, same operand
// order). Written out rather than taken from CUTLASS so that the prefill kernels
// build with the toolkit alone (CI has two cores; CuTe's templates cost minutes
// per translation unit).
#pragma once
#include <cstdint>

#include "cuda/common/ptx.cuh"

namespace mla::cuda::prefill {

using ptx::ldmatrix_x4;
using ptx::ldmatrix_x4_trans;
using ptx::mma_bf16_16816;
using ptx::pack_bf16x2;
using ptx::smem_addr;

// cp.async stays here rather than in ptx.cuh: the prefill kernels address
// shared memory by 32-bit shared-window offsets (the wgmma kernel computes its
// swizzled tile addresses that way), and these asm statements carry no "memory"
// clobber (ordering against ordinary shared accesses comes from the
// __syncthreads after cp_async_wait), where ptx.cuh's do; one wrapper for both
// would change what the compiler may reorder around them.
//
// 16-byte async copy; when `valid` is false nothing is read and the 16 bytes
// of shared memory are zero-filled (rows past a sequence's end must be zeros,
// not garbage: 0 * NaN would poison the P.V product).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

}  // namespace mla::cuda::prefill
