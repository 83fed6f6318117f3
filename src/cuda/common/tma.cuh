// Device side of TMA (sm_90): one bulk tensor copy global -> shared through a
// tensor map (tma_map.hpp), completing on an mbarrier's transaction bytes.
#pragma once
#include <cuda.h>

#include <cstdint>

#include "cuda/common/ptx.cuh"

namespace mla::cuda::ptx {

// Box at coordinates (c0 innermost, c1, c2) of a 3-D map into `smem` (aligned
// as the map's swizzle needs: 1024 B for 128-byte swizzle); the bytes count
// on `bar`, whose phase must expect them (mbarrier.arrive.expect_tx).
// `map` is the address of a __grid_constant__ kernel parameter.
__device__ __forceinline__ void tma_load_3d(void* smem, const CUtensorMap* map, int c0, int c1,
                                            int c2, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes "
      "[%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(smem_addr(smem)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(bar))
      : "memory");
}

// The first 1024-byte aligned address at or after `smem_raw` (the dynamic
// shared memory base): TMA's 128-byte swizzle and the SW128 wgmma descriptors
// need 1024-byte aligned tiles, and the runtime promises only 16 bytes.
__device__ __forceinline__ uint8_t* align_smem_1024(uint8_t* smem_raw) {
  return smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
}

// Arrive (count 1) and add `bytes` to the phase's expected transaction bytes.
__device__ __forceinline__ void mbar_arrive_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}

}  // namespace mla::cuda::ptx
