// Combine: merges the fp32 partials of every split request by log-sum-exp.
// Requests with one piece were written directly by the main kernel and are
// skipped. The merge order is the piece order, fixed by the
// schedule, so equal schedules give equal bits.
#include <cuda_bf16.h>

#include <cmath>

#include "cuda/common/ptx.cuh"
#include "cuda/decode/decode_keys.cuh"
#include "cuda/decode/split/split.hpp"

namespace mla::cuda::split {

using decode::DecodeParams;
namespace {

constexpr int kCombineThreads = 256;
constexpr int kCombineWarps = kCombineThreads / 32;

// One CTA per (request, query row): the 8 warps take every 8th piece (one
// warp per row in sequence is latency-bound on a request split over every
// worker), each lane holding 16 of the 512 dims, and the warps' sums meet in
// shared memory in a fixed order, so the bits depend only on the number of
// pieces.
__global__ void __launch_bounds__(kCombineThreads) split_combine_kernel(const DecodeParams p) {
  const int b = blockIdx.x, rr = blockIdx.y;
  const RequestSplit rs = p.req_split[b];
  if (rs.num_pieces <= 1) return;
  __shared__ float s_red[kCombineWarps];
  __shared__ float s_acc[kCombineWarps][decode::kDv];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int n = rs.num_pieces;
  const float* plse = p.partial_lse + int64_t(rs.slot_base) * p.rows + rr;

  // max over pieces (order-free), NaN flag
  float mx = -INFINITY;
  int nan = 0;
  for (int i = tid; i < n; i += kCombineThreads) {
    const float v = plse[int64_t(i) * p.rows];
    nan |= isnan(v);
    mx = fmaxf(mx, v);
  }
  nan = __syncthreads_or(nan);
  for (int m = 16; m > 0; m /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, m));
  if (lane == 0) s_red[warp] = mx;
  __syncthreads();
  mx = s_red[0];
  for (int w = 1; w < kCombineWarps; ++w) mx = fmaxf(mx, s_red[w]);
  __syncthreads();
  // sum of exp(lse - max), fixed reduction tree
  float sum = 0.f;
  if (mx != -INFINITY)
    for (int i = tid; i < n; i += kCombineThreads) sum += expf(plse[int64_t(i) * p.rows] - mx);
  for (int m = 16; m > 0; m /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, m);
  if (lane == 0) s_red[warp] = sum;
  __syncthreads();
  sum = 0.f;
  for (int w = 0; w < kCombineWarps; ++w) sum += s_red[w];

  float4 acc[4] = {};
  if (mx != -INFINITY) {
    const float inv = 1.f / sum;
#pragma unroll 2
    for (int i = warp; i < n; i += kCombineWarps) {
      const float wgt = expf(plse[int64_t(i) * p.rows] - mx) * inv;
      const float* po = p.partial_out + (int64_t(rs.slot_base + i) * p.rows + rr) * decode::kDv;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float4 v = *reinterpret_cast<const float4*>(po + lane * 4 + 128 * k);
        acc[k].x += wgt * v.x;
        acc[k].y += wgt * v.y;
        acc[k].z += wgt * v.z;
        acc[k].w += wgt * v.w;
      }
    }
  }
#pragma unroll
  for (int k = 0; k < 4; ++k) *reinterpret_cast<float4*>(&s_acc[warp][lane * 4 + 128 * k]) = acc[k];
  __syncthreads();
  const int d = 2 * tid;  // 256 threads x 2 dims
  float o0 = 0.f, o1 = 0.f;
  for (int w = 0; w < kCombineWarps; ++w) {
    o0 += s_acc[w][d];
    o1 += s_acc[w][d + 1];
  }
  float lse = mx == -INFINITY ? -INFINITY : mx + logf(sum);
  if (nan) o0 = o1 = lse = NAN;
  const int h = rr % p.h_q;
  int tb, s;
  decode::token_coords(p, b, rr / p.h_q, &tb, &s);
  const int64_t off = tb * p.out_stride_b + s * p.out_stride_s + h * p.out_stride_h + d;
  if (p.out_f32)
    *reinterpret_cast<float2*>(static_cast<float*>(p.out) + off) = make_float2(o0, o1);
  else
    *reinterpret_cast<uint32_t*>(static_cast<__nv_bfloat16*>(p.out) + off) =
        ptx::pack_bf16x2(o0, o1);
  if (tid == 0) p.lse[tb * p.lse_stride_b + h * p.lse_stride_h + s * p.lse_stride_s] = lse;
}

}  // namespace

cudaError_t launch_combine(const DecodeParams& p, cudaStream_t stream) {
  split_combine_kernel<<<dim3(p.B, p.rows), kCombineThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace mla::cuda::split
