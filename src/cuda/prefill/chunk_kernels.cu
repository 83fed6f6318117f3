#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cmath>

#include "cuda/prefill/chunk_kernels.hpp"
#include "mla/dims.hpp"
#include "mla/kv_cache.hpp"

namespace mla::cuda::prefill {
namespace {

constexpr int kLatent = kDqk;                  // an entry's latent: c_kv ; k_rope (576)
constexpr int kDvHead = 128;                   // per-head value dims of the non-absorbed form
constexpr int kBf16Chunks = kLatent * 2 / 16;  // 72 16-byte chunks per bf16 entry
constexpr int kFp8RopeOffset = Fp8DsMlaLayout::kRopeOffset;
constexpr int kFp8ScaleOffset = Fp8DsMlaLayout::kScaleOffset;

// One warp per token.
__global__ void gather_latent_kernel(const GatherLatentParams p) {
  const int64_t i = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (i >= p.n) return;
  const int64_t tok = p.first_token + i;
  const int64_t page = p.block_table_row[tok / p.page_size];
  const int64_t off = tok % p.page_size;
  uint4* dst = reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(p.out) + i * kLatent);
  if (!p.fp8) {
    const uint4* src =
        reinterpret_cast<const uint4*>(p.cache + page * p.page_stride_bytes + off * (kLatent * 2));
    for (int c = lane; c < kBf16Chunks; c += 32) dst[c] = src[c];
    return;
  }
  const unsigned char* e = p.cache + page * p.page_stride_bytes + off * Fp8DsMlaLayout::kEntryBytes;
  const float* scales = reinterpret_cast<const float*>(e + kFp8ScaleOffset);
  __nv_bfloat16* d = static_cast<__nv_bfloat16*>(p.out) + i * kLatent;
  // 512 e4m3 values: 16 per lane. e4m3 times a power of two is exact in bf16.
  for (int j = lane * 16; j < kDc; j += 32 * 16) {
    const uint4 raw = *reinterpret_cast<const uint4*>(e + j);
    const unsigned char* b = reinterpret_cast<const unsigned char*>(&raw);
    const float s = scales[j / 128];
    __align__(16) __nv_bfloat16 v[16];
#pragma unroll
    for (int t = 0; t < 16; ++t) {
      __nv_fp8_e4m3 f;
      f.__x = b[t];
      v[t] = __float2bfloat16_rn(float(f) * s);
    }
    reinterpret_cast<uint4*>(d + j)[0] = reinterpret_cast<uint4*>(v)[0];
    reinterpret_cast<uint4*>(d + j)[1] = reinterpret_cast<uint4*>(v)[1];
  }
  // k_rope: 128 bytes = 8 chunks of 16.
  if (lane < 8)
    reinterpret_cast<uint4*>(d + kDc)[lane] =
        reinterpret_cast<const uint4*>(e + kFp8RopeOffset)[lane];
}

// One warp per (token, head) row, 4 values per lane.
__global__ void merge_kernel(const MergeParams p) {
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= p.tokens * p.heads) return;
  const int64_t tok = row / p.heads;
  const int head = int(row % p.heads);
  const int64_t lse_idx = int64_t(head) * p.tokens + tok;
  const float la = p.acc_lse[lse_idx], lb = p.part_lse[lse_idx];
  const float m = fmaxf(la, lb);
  float wa = 0.f, wb = 0.f, lse = -INFINITY;
  if (m != -INFINITY) {  // both -inf: the row has seen no key yet
    const float ea = expf(la - m), eb = expf(lb - m);
    lse = m + logf(ea + eb);
    wa = expf(la - lse);
    wb = expf(lb - lse);
  }
  const float4 a = reinterpret_cast<const float4*>(p.acc_out + row * kDvHead)[lane];
  const float4 b = reinterpret_cast<const float4*>(p.part_out + row * kDvHead)[lane];
  const float4 r = make_float4(a.x * wa + b.x * wb, a.y * wa + b.y * wb, a.z * wa + b.z * wb,
                               a.w * wa + b.w * wb);
  if (p.final_out == nullptr) {
    reinterpret_cast<float4*>(p.acc_out + row * kDvHead)[lane] = r;
    if (lane == 0) p.acc_lse[lse_idx] = lse;
  } else {
    __nv_bfloat16* d = static_cast<__nv_bfloat16*>(p.final_out) + tok * p.final_row_stride +
                       int64_t(head) * p.final_head_stride + lane * 4;
    reinterpret_cast<__nv_bfloat162*>(d)[0] = __floats2bfloat162_rn(r.x, r.y);
    reinterpret_cast<__nv_bfloat162*>(d)[1] = __floats2bfloat162_rn(r.z, r.w);
    if (lane == 0 && p.final_lse != nullptr)
      p.final_lse[int64_t(head) * p.final_lse_head_stride + tok] = lse;
  }
}

}  // namespace

cudaError_t gather_latent(const GatherLatentParams& p, cudaStream_t stream) {
  if (p.n <= 0) return cudaSuccess;
  constexpr int kWarps = 8;
  const unsigned blocks = unsigned((p.n + kWarps - 1) / kWarps);
  gather_latent_kernel<<<blocks, kWarps * 32, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t merge_partials(const MergeParams& p, cudaStream_t stream) {
  const int64_t rows = p.tokens * p.heads;
  if (rows <= 0) return cudaSuccess;
  constexpr int kWarps = 8;
  merge_kernel<<<unsigned((rows + kWarps - 1) / kWarps), kWarps * 32, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace mla::cuda::prefill
