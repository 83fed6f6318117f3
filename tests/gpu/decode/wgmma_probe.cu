// Device side of test_wgmma_gpu.cpp: one warpgroup runs the decode kernel's
// two wgmma products on known matrices, with the kernel's own shared-memory
// layout (tile_off) and descriptors (desc_kmajor, desc_v), so a wrong
// swizzle, descriptor field or transpose bit shows here in isolation.
#include "cuda/decode/decode_kernel.cuh"
#include "gpu/decode/wgmma_probe.hpp"

namespace mla::testing {
namespace {

using namespace mla::cuda;
using namespace mla::cuda::decode;

// A, B: [64][576] 16-bit values (bf16 or f16: T) row-major in global memory. Computes
//   s[64][32]  = A . B[32..63]^T   (S of the math warpgroup 1: K-major A and B)
//   o[64][256] = A[:, 0:64] . B[:, 256:512]   (P.V of warpgroup 1: V MN-major)
// a, b into two tiles in the decode kernel's SW128 layout (tile_off), by 128 threads.
__device__ void fill_tiles(const uint16_t* a, const uint16_t* b, uint8_t* sA, uint8_t* sB,
                           int tid) {
  for (int idx = tid; idx < 64 * kChunksPerRow; idx += 128) {
    const int r = idx / kChunksPerRow, q = idx % kChunksPerRow;
    *reinterpret_cast<uint4*>(sA + tile_off(r, q)) =
        *reinterpret_cast<const uint4*>(a + r * kDqk + q * 8);
    *reinterpret_cast<uint4*>(sB + tile_off(r, q)) =
        *reinterpret_cast<const uint4*>(b + r * kDqk + q * 8);
  }
  wgmma::fence_proxy_async();
  __syncthreads();
}

// A warpgroup's m64nN accumulator (wgmma.cuh's layout) to a row-major
// [64][N] array, N = 8R.
template <int R>
__device__ void store_rows(const float (&d)[R][4], float* out, int tid) {
  const int wi = tid / 32, g = (tid % 32) / 4, c = tid % 4;
  for (int h = 0; h < 2; ++h) {
    const int r = 16 * wi + g + 8 * h;
    for (int i = 0; i < R; ++i)
      for (int e = 0; e < 2; ++e) out[r * 8 * R + 8 * i + 2 * c + e] = d[i][2 * h + e];
  }
}

template <wgmma::Elem T>
__global__ void __launch_bounds__(128, 1)
    probe_kernel(const uint16_t* a, const uint16_t* b, float* s_out, float* o_out) {
  extern __shared__ __align__(1024) uint8_t smem[];
  uint8_t* sA = smem;
  uint8_t* sB = smem + kTileBytes;
  const int tid = threadIdx.x;
  fill_tiles(a, b, sA, sB, tid);
  const uint32_t aA = ptx::smem_addr(sA), aB = ptx::smem_addr(sB);
  float sacc[4][4];
  float o[32][4];
  wgmma::fence();
  for (int kb = 0; kb < kBlocks; ++kb)
    for (int k4 = 0; k4 < 4; ++k4)
      wgmma::mma_ss<T, 32>(sacc, desc_kmajor(aA, 0, kb, k4), desc_kmajor(aB, 32, kb, k4),
                           kb + k4 > 0);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
    wgmma::mma_ss<T, 256, true>(o, desc_kmajor(aA, 0, 0, kk), desc_v(aB, 256, kk), kk > 0);
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::fence_regs(sacc);
  wgmma::fence_regs(o);
  store_rows(sacc, s_out, tid);
  store_rows(o, o_out, tid);
}

// The narrow kernel's transposed products (decode_narrow.cuh), f16:
//   st[64][16] = A . B[0:16]^T            (S^T: A = the stage, B = Q's rows 0-15)
//   ot[64][16] = A[:, 256:320]^T . P^T     (O^T of value dims 256..319: A read
//                MN-major, tnspA; P[n][k] = B[n][k] for n < 16, k < 64, the
//                layout of a warpgroup's P^T block)
__global__ void __launch_bounds__(128, 1)
    probe_narrow_kernel(const uint16_t* a, const uint16_t* b, float* st_out, float* ot_out) {
  extern __shared__ __align__(1024) uint8_t smem[];
  uint8_t* sA = smem;
  uint8_t* sB = smem + kTileBytes;
  const int tid = threadIdx.x;
  fill_tiles(a, b, sA, sB, tid);
  const uint32_t aA = ptx::smem_addr(sA), aB = ptx::smem_addr(sB);
  float st[2][4], ot[2][4];
  wgmma::fence();
  for (int kb = 0; kb < kBlocks; ++kb)
    for (int k4 = 0; k4 < 4; ++k4)
      wgmma::mma_ss<wgmma::Elem::kF16, 16>(st, desc_kmajor(aA, 0, kb, k4),
                                           desc_kmajor(aB, 0, kb, k4), kb + k4 > 0);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
    wgmma::mma_ss<wgmma::Elem::kF16, 16, false, true>(ot, desc_v(aA, 256, kk),
                                                      desc_kmajor(aB, 0, 0, kk), kk > 0);
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::fence_regs(st);
  wgmma::fence_regs(ot);
  store_rows(st, st_out, tid);
  store_rows(ot, ot_out, tid);
}

}  // namespace

namespace {
using ProbeKernel = void (*)(const uint16_t*, const uint16_t*, float*, float*);
cudaError_t run_probe(ProbeKernel kernel, const uint16_t* a, const uint16_t* b, float* out0,
                      float* out1) {
  const int smem = 2 * kTileBytes;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  kernel<<<1, 128, smem>>>(a, b, out0, out1);
  e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  return cudaDeviceSynchronize();
}
}  // namespace

cudaError_t run_wgmma_narrow_probe(const uint16_t* a, const uint16_t* b, float* st_out,
                                   float* ot_out) {
  return run_probe(probe_narrow_kernel, a, b, st_out, ot_out);
}

cudaError_t run_wgmma_probe(const uint16_t* a, const uint16_t* b, float* s_out, float* o_out,
                            bool f16) {
  return run_probe(f16 ? probe_kernel<wgmma::Elem::kF16> : probe_kernel<wgmma::Elem::kBf16>, a, b,
                   s_out, o_out);
}

}  // namespace mla::testing
