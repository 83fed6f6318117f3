// fp8 e4m3 <-> float on the device, matching the host rules of
// include/mla/numeric.hpp and src/reference/fp8_quant.* bit for bit:
//   float -> e4m3: round to nearest even, saturating to +-448 (satfinite),
//                  NaN -> 0x7f, a negative value that rounds to zero -> 0x80;
//   e4m3 -> float: exact.
#pragma once
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace mla::cuda {

inline constexpr float kE4m3Max = 448.f;

// Two e4m3 codes (low byte first) -> two floats, exactly (via f16, which holds
// every e4m3 value).
__device__ __forceinline__ float2 e4m3x2_to_float2(uint16_t codes) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(codes, __NV_E4M3);
  return __half22float2(*reinterpret_cast<const __half2*>(&h));
}

// Two e4m3 codes (low byte first) -> f16x2, exactly (one cvt.rn.f16x2.e4m3x2).
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint16_t codes) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(codes, __NV_E4M3);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// Two e4m3 codes (low byte first) -> f16x2 times s2 (both halves the same
// factor). The conversion is exact (one cvt.rn.f16x2.e4m3x2); the product is
// exact whenever s2 is a power of two and the result stays in f16's range
// (the callers bound it), else rounded once to f16.
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2_scaled(uint16_t codes, __half2 s2) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(codes, __NV_E4M3);
  const __half2 v = __hmul2(*reinterpret_cast<const __half2*>(&h), s2);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Two floats -> two e4m3 codes (lo in the low byte), RNE with saturation.
__device__ __forceinline__ uint16_t float2_to_e4m3x2(float lo, float hi) {
  return __nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, __NV_E4M3);
}

// The smallest power of two >= x for finite x > 0, from the exponent bits
// (the reference's pow2_ceil: a power of two maps to itself).
__device__ __forceinline__ float pow2_ceil(float x) {
  int e;
  const float m = frexpf(x, &e);
  return m == 0.5f ? x : ldexpf(1.f, e);
}

// Scale of a 128-value group of the fp8_ds_mla entry (docs/design.md section 2.3):
// 2^ceil(log2(max(amax / 448, 1e-4))), the division in fp32 as the reference.
__device__ __forceinline__ float fp8_ds_mla_scale(float amax) {
  return pow2_ceil(fmaxf(__fdiv_rn(amax, kE4m3Max), 1e-4f));
}

}  // namespace mla::cuda
