#include <cuda_bf16.h>

#include "cuda/common/random_fill.hpp"

namespace mla::cuda {
namespace {

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
__device__ __forceinline__ float unit(uint64_t h) {
  return float(h >> 40) * (1.f / 16777216.f);
}

__global__ void fill_bf16_kernel(__nv_bfloat16* d, int64_t n, float lo, float hi, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    d[i] =
        __float2bfloat16_rn(lo + (hi - lo) * unit(splitmix64(seed ^ (uint64_t(i) * 0x632be5ab))));
}

__global__ void fill_i32_kernel(int32_t* d, int64_t n, int32_t modulo, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    d[i] = int32_t(splitmix64(seed ^ (uint64_t(i) * 0x632be5ab)) % uint64_t(modulo));
}

__global__ void fill_fp8_kernel(uint8_t* d, int64_t n, int64_t stride, uint64_t seed) {
  // one thread per 4 bytes of an entry (164 words)
  const int64_t words = n * 164;
  for (int64_t w = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; w < words;
       w += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = w / 164;
    const int k = int(w % 164);
    const uint64_t h = splitmix64(seed ^ (uint64_t(w) * 0x632be5ab));
    uint32_t v;
    if (k < 128) {  // e4m3 codes, NaN (0x7f/0xff) replaced
      v = uint32_t(h);
      for (int b = 0; b < 4; ++b)
        if (((v >> (8 * b)) & 0x7f) == 0x7f) v ^= 1u << (8 * b);
    } else if (k < 132) {  // scale 2^-8..2^-2
      const float s = ldexpf(1.f, -8 + int(h % 7));
      v = __float_as_uint(s);
    } else {  // two bf16 rope values
      const __nv_bfloat162 r =
          __floats2bfloat162_rn(2.f * unit(h) - 1.f, 2.f * unit(h << 20) - 1.f);
      v = *reinterpret_cast<const uint32_t*>(&r);
    }
    *reinterpret_cast<uint32_t*>(d + e * stride + 4 * k) = v;
  }
}

constexpr int kBlock = 256, kGrid = 4096;

}  // namespace

cudaError_t fill_uniform_bf16(void* dst, int64_t n, float lo, float hi, uint64_t seed,
                              cudaStream_t stream) {
  fill_bf16_kernel<<<kGrid, kBlock, 0, stream>>>(static_cast<__nv_bfloat16*>(dst), n, lo, hi, seed);
  return cudaGetLastError();
}
cudaError_t fill_uniform_i32(int32_t* dst, int64_t n, int32_t modulo, uint64_t seed,
                             cudaStream_t stream) {
  fill_i32_kernel<<<kGrid, kBlock, 0, stream>>>(dst, n, modulo, seed);
  return cudaGetLastError();
}
cudaError_t fill_fp8_ds_mla(void* dst, int64_t n, int64_t stride, uint64_t seed,
                            cudaStream_t stream) {
  fill_fp8_kernel<<<kGrid, kBlock, 0, stream>>>(static_cast<uint8_t*>(dst), n, stride, seed);
  return cudaGetLastError();
}

}  // namespace mla::cuda
