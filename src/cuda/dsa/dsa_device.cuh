// Device helpers of the top-k and sparse-attention kernels (the indexer's are
// in cuda/indexer/indexer_device.cuh): fp8 conversion, the top-k key map, and
// the cp.async / ldmatrix / mma.sync wrappers taken from cuda/common/ptx.cuh.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/fp8.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/dsa/dsa_host.hpp"

namespace mla::cuda::dsa {

// ---- conversions ----------------------------------------------------------------

// Four e4m3 bytes (little-endian in a word) to four floats (exact), two at a
// time through cuda/common/fp8.cuh.
__device__ __forceinline__ void e4m3x4_to_f32(uint32_t w, float* f) {
  const float2 a = e4m3x2_to_float2(static_cast<uint16_t>(w & 0xffff));
  const float2 b = e4m3x2_to_float2(static_cast<uint16_t>(w >> 16));
  f[0] = a.x;
  f[1] = a.y;
  f[2] = b.x;
  f[3] = b.y;
}

// Order-preserving map float -> uint32 for top-k: a larger logit has a larger
// key, -0 and +0 share one key (they compare equal), and -inf and every NaN map
// to 0, below every candidate (mla/topk.hpp: they are never selected).
__device__ __forceinline__ uint32_t topk_key(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7f800000u) == 0x7f800000u && ((u & 0x7fffffu) != 0 || (u >> 31)))
    return 0u;                   // NaN, -inf
  if (u == 0x80000000u) u = 0u;  // -0 -> +0
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}
__device__ __forceinline__ int64_t max64(int64_t a, int64_t b) {
  return a > b ? a : b;
}

// ---- cp.async, ldmatrix, mma.sync: the common wrappers -----------------------------
// cp.async without the "memory" clobber (ordering comes from the __syncthreads
// after cp_async_wait), as the kernels were written.
using ptx::ldmatrix_x4;
using ptx::ldmatrix_x4_trans;
using ptx::mma_bf16_16816;
using ptx::mma_e4m3_16832;
using ptx::pack_bf16x2;
using ptx::smem_addr;
using ptx::noclobber::cp_async_16;
using ptx::noclobber::cp_async_4;
using ptx::noclobber::cp_async_commit;
using ptx::noclobber::cp_async_wait;

}  // namespace mla::cuda::dsa
