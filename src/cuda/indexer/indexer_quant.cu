// Indexer quantisation: key-cache append and query quantisation. One warp
// quantises one 128-value vector with a power-of-two scale (docs/design.md section 2.5)
// and writes codes and scale into the token's page (or the query rows). Bytes
// identical to reference::quantize_indexer_vector.
#include <cuda_bf16.h>

#include "cuda/indexer/indexer_device.cuh"
#include "cuda/indexer/indexer_params.hpp"

namespace mla::cuda::indexer {
namespace {

constexpr int kWarpsPerBlock = 8;

// Four consecutive values (element offset `off`, a multiple of 4) as floats.
template <bool kBf16>
__device__ __forceinline__ void load4(const void* base, int64_t off, float* v) {
  if constexpr (kBf16) {
    const uint2 raw =
        *reinterpret_cast<const uint2*>(static_cast<const __nv_bfloat16*>(base) + off);
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
    const float2 a = __bfloat1622float2(h[0]), b = __bfloat1622float2(h[1]);
    v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
  } else {
    const float4 f = *reinterpret_cast<const float4*>(static_cast<const float*>(base) + off);
    v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
  }
}

// A 128-vector spread 4 per lane over a warp -> 4 e4m3 codes per lane and the
// vector's power-of-two scale s = 2^ceil(log2(max(amax, 1e-4) / 448)); v / s is
// exact, then clamp and round to nearest even (reference::quantize_indexer_vector).
// Non-finite values as reference/fp8_quant.hpp: amax over the finite values,
// inf saturates, NaN stays NaN, and a vector holding a NaN gets a NaN scale.
__device__ __forceinline__ uint32_t quantize_warp_vector(const float* v, float* scale) {
  auto mag = [](float x) { return isfinite(x) ? fabsf(x) : 0.f; };
  float amax = fmaxf(fmaxf(mag(v[0]), mag(v[1])), fmaxf(mag(v[2]), mag(v[3])));
  amax = warp_max(amax);
  const bool nan =
      __any_sync(0xffffffffu, isnan(v[0]) || isnan(v[1]) || isnan(v[2]) || isnan(v[3]));
  const float s = pow2_ceil_bits(fmaxf(amax, 1e-4f) / 448.f);
  uint32_t codes = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    // fmaxf/fminf would turn NaN into -448; the conversion keeps it NaN.
    const float x = isnan(v[i]) ? v[i] : fminf(fmaxf(v[i] / s, -448.f), 448.f);
    codes |= uint32_t(f32_to_e4m3(x)) << (8 * i);
  }
  *scale = nan ? __int_as_float(0x7fc00000) : s;
  return codes;
}

template <bool kBf16>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    indexer_append_kernel(IndexerAppendParams p) {
  const int64_t tok = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (tok >= p.num_tokens) return;
  const int64_t slot = p.slots[tok];
  const int64_t capacity = p.cache.num_pages * p.cache.page_size;
  if (slot < 0 || slot >= capacity) return;  // -1: padding; past the cache: never written
  float v[4];
  load4<kBf16>(p.keys, tok * p.key_row_stride + lane * 4, v);
  float scale;
  const uint32_t codes = quantize_warp_vector(v, &scale);
  const int64_t page = slot / p.cache.page_size, off = slot % p.cache.page_size;
  uint8_t* page_base = p.cache.base + page * p.cache.page_stride;
  reinterpret_cast<uint32_t*>(page_base + off * kIndexerDim)[lane] = codes;
  if (lane == 0)
    reinterpret_cast<float*>(page_base + int64_t(p.cache.page_size) * kIndexerDim)[off] = scale;
}

// One warp per (row, head) of the query: codes into q8, the scale folded into
// the head weight as w * 64^-0.5 * 128^-0.5 * s, in double like the reference.
template <bool kBf16>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) indexer_query_kernel(IndexerQueryParams p) {
  const int64_t w = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (w >= p.rows * kIndexerHeads) return;
  const int64_t row = w / kIndexerHeads, h = w % kIndexerHeads;
  float v[4];
  load4<kBf16>(p.q, row * p.q_row_stride + h * p.q_head_stride + lane * 4, v);
  float scale;
  const uint32_t codes = quantize_warp_vector(v, &scale);
  reinterpret_cast<uint32_t*>(p.q8 + row * p.q8_row_stride + h * p.q8_head_stride)[lane] = codes;
  if (lane == 0) {
    const double fold = 1.0 / sqrt(double(kIndexerHeads)) / sqrt(double(kIndexerDim));
    p.w_folded[row * p.wf_row_stride + h] =
        float(double(p.weights[row * p.w_row_stride + h]) * fold * double(scale));
  }
}

}  // namespace

Status launch_indexer_query(const IndexerQueryParams& p, cudaStream_t stream) {
  if (p.rows == 0) return Status::Ok();
  const unsigned blocks = unsigned((p.rows * kIndexerHeads + kWarpsPerBlock - 1) / kWarpsPerBlock);
  if (p.q_is_bf16)
    indexer_query_kernel<true><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(p);
  else
    indexer_query_kernel<false><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(p);
  return check_launch("indexer_query_kernel");
}

Status launch_indexer_append(const IndexerAppendParams& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return Status::Ok();
  const unsigned blocks = unsigned((p.num_tokens + kWarpsPerBlock - 1) / kWarpsPerBlock);
  if (p.key_is_bf16)
    indexer_append_kernel<true><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(p);
  else
    indexer_append_kernel<false><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(p);
  return check_launch("indexer_append_kernel");
}

}  // namespace mla::cuda::indexer
