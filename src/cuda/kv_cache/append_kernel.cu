// The cache-append kernel: one warp per token. Lane l owns c_kv values
// 16l..16l+15 (so the 8 lanes of a 128-value fp8 group reduce the group's amax
// with three shuffles) and k_rope values 2l, 2l+1. fp8_e4m3: the same values
// divided by the cache's one scale (docs in mla/kv_cache.hpp), rope included.
#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common/fp8.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/kv_cache/kv_cache_params.hpp"
#include "mla/kv_cache.hpp"

namespace mla::cuda::kv_cache {
namespace {

constexpr int kTokensPerBlock = 8;

template <bool kBf16In>
__device__ __forceinline__ float load_value(const void* base, int64_t idx) {
  if constexpr (kBf16In)
    return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[idx]);
  else
    return static_cast<const float*>(base)[idx];
}

// v[0..16) / s as 16 e4m3 codes at dst (16-byte aligned): each quotient
// rounded once (RNE, __fdiv_rn), then RNE with saturation to +-448.
__device__ __forceinline__ void store_e4m3x16(uint8_t* dst, const float (&v)[16], float s) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint16_t lo = float2_to_e4m3x2(__fdiv_rn(v[4 * i], s), __fdiv_rn(v[4 * i + 1], s));
    const uint16_t hi = float2_to_e4m3x2(__fdiv_rn(v[4 * i + 2], s), __fdiv_rn(v[4 * i + 3], s));
    w[i] = uint32_t(lo) | (uint32_t(hi) << 16);
  }
  *reinterpret_cast<uint4*>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
}

template <bool kBf16In, KvFormat kFormat>
__global__ void __launch_bounds__(kTokensPerBlock * 32) append_kernel(const AppendParams p) {
  const int64_t t = int64_t(blockIdx.x) * kTokensPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (t >= p.T) return;
  const int64_t slot = p.slots[t * p.slots_stride];
  const int64_t capacity = int64_t(p.num_pages) * p.page_size;
  if (slot < 0 || slot >= capacity) return;  // -1: padding; others: out of range, skipped
  uint8_t* entry = p.cache + (slot / p.page_size) * p.page_stride_bytes +
                   (slot % p.page_size) * p.token_stride_bytes;

  float v[16];
#pragma unroll
  for (int i = 0; i < 16; ++i)
    v[i] = load_value<kBf16In>(p.c_kv, t * p.c_kv_stride_t + (lane * 16 + i) * p.c_kv_stride_d);
  const float r0 =
      load_value<kBf16In>(p.k_rope, t * p.rope_stride_t + (2 * lane) * p.rope_stride_d);
  const float r1 =
      load_value<kBf16In>(p.k_rope, t * p.rope_stride_t + (2 * lane + 1) * p.rope_stride_d);

  if constexpr (kFormat == KvFormat::fp8_e4m3) {
    // v / s rounded once (RNE, as the reference's fp32 division), then RNE
    // with saturation: the reference's quantize_e4m3 bit for bit.
    const float s = __ldg(p.scale);
    store_e4m3x16(entry + lane * 16, v, s);
    *reinterpret_cast<uint16_t*>(entry + kDc + lane * 2) =
        float2_to_e4m3x2(__fdiv_rn(r0, s), __fdiv_rn(r1, s));
    return;
  }
  const uint32_t rope_bits = ptx::pack_bf16x2(r0, r1);
  if constexpr (kFormat == KvFormat::fp8_ds_mla) {
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < 16; ++i)  // finite values only (reference/fp8_quant.hpp)
      amax = fmaxf(amax, isfinite(v[i]) ? fabsf(v[i]) : 0.f);
#pragma unroll
    for (int m = 1; m < 8; m *= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
    const float s = fp8_ds_mla_scale(amax);
    // v / s is exact (s is a power of two); satfinite clamps to +-448 as the
    // reference's clamp does.
    store_e4m3x16(entry + lane * 16, v, s);
    if (lane % 8 == 0)
      *reinterpret_cast<float*>(entry + Fp8DsMlaLayout::kScaleOffset + (lane / 8) * 4) = s;
    *reinterpret_cast<uint32_t*>(entry + Fp8DsMlaLayout::kRopeOffset + lane * 4) = rope_bits;
  } else {
    uint32_t w[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) w[i] = ptx::pack_bf16x2(v[2 * i], v[2 * i + 1]);
    uint4* dst = reinterpret_cast<uint4*>(entry + lane * 32);
    dst[0] = make_uint4(w[0], w[1], w[2], w[3]);
    dst[1] = make_uint4(w[4], w[5], w[6], w[7]);
    *reinterpret_cast<uint32_t*>(entry + 1024 + lane * 4) = rope_bits;
  }
}

}  // namespace

cudaError_t launch_append(const AppendParams& p, cudaStream_t stream) {
  if (p.T == 0) return cudaSuccess;
  const dim3 grid(unsigned((p.T + kTokensPerBlock - 1) / kTokensPerBlock));
  const dim3 block(kTokensPerBlock * 32);
  auto launch = [&](auto bf16_in) {
    constexpr bool kB = decltype(bf16_in)::value;
    if (p.format == int32_t(KvFormat::fp8_ds_mla))
      append_kernel<kB, KvFormat::fp8_ds_mla><<<grid, block, 0, stream>>>(p);
    else if (p.format == int32_t(KvFormat::fp8_e4m3))
      append_kernel<kB, KvFormat::fp8_e4m3><<<grid, block, 0, stream>>>(p);
    else
      append_kernel<kB, KvFormat::bf16><<<grid, block, 0, stream>>>(p);
  };
  if (p.bf16_in)
    launch(std::true_type{});
  else
    launch(std::false_type{});
  return cudaGetLastError();
}

}  // namespace mla::cuda::kv_cache
