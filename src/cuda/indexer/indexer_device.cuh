// Device helpers of the indexer kernels: the e4m3 conversion and scale rule of
// the quantisation (bytes identical to reference::quantize_indexer_vector), a
// warp maximum, the shared-memory regions of the TMA-ring kernels, and the
// cp.async wrappers of cuda/common/ptx.cuh.
#pragma once
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/cuda_status.hpp"
#include "cuda/common/ptx.cuh"
#include "cuda/common/tma.cuh"

namespace mla::cuda::indexer {

// e4m3 by round-to-nearest-even with saturation to +-448; -0 stays 0x80 (the
// hardware conversion keeps the sign), exactly as mla::float_to_e4m3 on the host.
__device__ __forceinline__ uint8_t f32_to_e4m3(float v) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}

// The smallest power of two >= x for finite x > 0, from the exponent bits (no
// log2 rounding): the indexer's scale rule (docs/design.md 2.5). Same values as
// cuda/common/fp8.cuh's pow2_ceil, which goes through frexpf/ldexpf.
__device__ __forceinline__ float pow2_ceil_bits(float x) {
  uint32_t u = __float_as_uint(x);
  const uint32_t mant = u & 0x7fffffu;
  uint32_t e = u & 0x7f800000u;
  if (e == 0) return ldexpf(1.f, -126 + (mant ? 32 - __clz(mant) - 23 : 0));  // subnormal input
  if (mant != 0) e += 0x800000u;
  return __uint_as_float(e);
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The regions of a TMA-ring indexer kernel's shared memory, carved from the
// 1024-byte aligned dynamic base by a layout S (byte offsets kQueryOff: the
// queries, kStageOff: the ring of key tiles, kWeightOff: the weights f32,
// kBarOff: the mbarriers).
struct RingSmem {
  uint8_t* q;
  uint8_t* stages;
  float* w;
  uint64_t* bars;
};
template <class S>
__device__ __forceinline__ RingSmem carve_ring_smem(uint8_t* smem_raw) {
  uint8_t* base = ptx::align_smem_1024(smem_raw);
  return {base + S::kQueryOff, base + S::kStageOff, reinterpret_cast<float*>(base + S::kWeightOff),
          reinterpret_cast<uint64_t*>(base + S::kBarOff)};
}

// cp.async without the "memory" clobber: ordering comes from the
// __syncthreads (or fence + barrier) after cp_async_wait.
using ptx::smem_addr;
using ptx::noclobber::cp_async_16;
using ptx::noclobber::cp_async_commit;
using ptx::noclobber::cp_async_wait;

}  // namespace mla::cuda::indexer
