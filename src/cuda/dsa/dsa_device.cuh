// Device helpers shared by the DSA kernels (indexer, top-k, sparse attention):
// fp8/bf16 conversions, warp primitives, and the cp.async / ldmatrix / mma.sync
// wrappers taken from cuda/common/ptx.cuh. Kept in one place so every kernel
// converts and loads the same way. pow2_ceil stays here rather than being
// cuda/common/fp8.cuh's: that one goes through frexpf/ldexpf, this one through
// the exponent bits (same values, different machine code in these kernels).
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

// e4m3 by round-to-nearest-even with saturation to +-448; -0 stays 0x80 (the
// hardware conversion keeps the sign), exactly as mla::float_to_e4m3 on the host.
__device__ __forceinline__ uint8_t f32_to_e4m3(float v) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}
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

// The smallest power of two >= x for finite x > 0, from the exponent bits (no
// log2 rounding): the scale rule of DESIGN.md section 2.
__device__ __forceinline__ float pow2_ceil(float x) {
  uint32_t u = __float_as_uint(x);
  const uint32_t mant = u & 0x7fffffu;
  uint32_t e = u & 0x7f800000u;
  if (e == 0) return ldexpf(1.f, -126 + (mant ? 32 - __clz(mant) - 23 : 0));  // subnormal input
  if (mant != 0) e += 0x800000u;
  return __uint_as_float(e);
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

// ---- warp primitives ------------------------------------------------------------
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
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
