// Combine: merges the fp32 partials of every split request by log-sum-exp.
// One warp per query row; requests with one piece were written directly by the
// main kernel and are skipped. The merge order is the piece order, fixed by the
// schedule, so equal schedules give equal bits.
#include <cuda_bf16.h>

#include <cmath>

#include "cuda/common/ptx.cuh"
#include "cuda/decode/decode_launch.hpp"

namespace mla::cuda::decode {
namespace {

constexpr int kRowsPerBlock = 8;

__global__ void __launch_bounds__(kRowsPerBlock * 32) decode_combine_kernel(const DecodeParams p) {
  const int b = blockIdx.x;
  const int lane = threadIdx.x % 32;
  const int rr = blockIdx.y * kRowsPerBlock + threadIdx.x / 32;
  if (rr >= p.rows) return;
  const RequestSplit rs = p.req_split[b];
  if (rs.num_pieces <= 1) return;
  const float* plse = p.partial_lse + int64_t(rs.slot_base) * p.rows + rr;
  float mx = -INFINITY;
  bool nan = false;
  for (int i = 0; i < rs.num_pieces; ++i) {
    const float v = plse[int64_t(i) * p.rows];
    nan |= isnan(v);
    mx = fmaxf(mx, v);
  }
  float sum = 0.f;
  if (mx != -INFINITY)
    for (int i = 0; i < rs.num_pieces; ++i) sum += expf(plse[int64_t(i) * p.rows] - mx);
  // Lane owns dims lane*4 + 128*k, k = 0..3 (float4 loads, coalesced).
  float4 acc[4] = {};
  if (mx != -INFINITY) {
    const float inv = 1.f / sum;
    for (int i = 0; i < rs.num_pieces; ++i) {
      const float w = expf(plse[int64_t(i) * p.rows] - mx) * inv;
      const float* po = p.partial_out + (int64_t(rs.slot_base + i) * p.rows + rr) * kDv;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float4 v = *reinterpret_cast<const float4*>(po + lane * 4 + 128 * k);
        acc[k].x += w * v.x;
        acc[k].y += w * v.y;
        acc[k].z += w * v.z;
        acc[k].w += w * v.w;
      }
    }
  }
  float lse = mx == -INFINITY ? -INFINITY : mx + logf(sum);
  if (nan) {
    lse = NAN;
    for (auto& a : acc) a = make_float4(NAN, NAN, NAN, NAN);
  }
  const int s = rr / p.h_q, h = rr % p.h_q;
  const int64_t off = b * p.out_stride_b + s * p.out_stride_s + h * p.out_stride_h;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int d = lane * 4 + 128 * k;
    if (p.out_f32) {
      *reinterpret_cast<float4*>(static_cast<float*>(p.out) + off + d) = acc[k];
    } else {
      uint2 v =
          make_uint2(ptx::pack_bf16x2(acc[k].x, acc[k].y), ptx::pack_bf16x2(acc[k].z, acc[k].w));
      *reinterpret_cast<uint2*>(static_cast<__nv_bfloat16*>(p.out) + off + d) = v;
    }
  }
  if (lane == 0) p.lse[b * p.lse_stride_b + h * p.lse_stride_h + s * p.lse_stride_s] = lse;
}

}  // namespace

cudaError_t launch_decode_combine(const DecodeParams& p, cudaStream_t stream) {
  const dim3 grid(p.B, (p.rows + kRowsPerBlock - 1) / kRowsPerBlock);
  decode_combine_kernel<<<grid, kRowsPerBlock * 32, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace mla::cuda::decode
