// Combine: merges the fp32 partials of every split request by log-sum-exp.
// Requests with one piece were written directly by the main kernel and are
// skipped. The merge order is the piece order, fixed by the schedule, so
// equal schedules give equal bits.
#include <cuda_bf16.h>

#include <cmath>

#include "cuda/common/ptx.cuh"
#include "cuda/decode/decode_keys.cuh"
#include "cuda/decode/split/pdl.hpp"
#include "cuda/decode/split/split.hpp"

namespace mla::cuda::split {

using decode::DecodeParams;

namespace {

constexpr int kCombineThreads = 256;
constexpr int kCombineWarps = kCombineThreads / 32;

// Two layouts, chosen on the host from B, P and the mode only (in
// batch-invariant mode always the first, so a request's bits never depend on
// the rest of the batch):
//  * kCombineWarps rows per CTA (batch-invariant mode, or when these CTAs are
//    at least as many as the SMs): one warp per query row, each lane 16 of
//    the 512 dims, the pieces merged in order (one CTA per row would be
//    16,384 CTAs of ~2 pieces each at b128 h128, costing more to schedule
//    and synchronise than they read).
//  * one row per CTA (few requests, e.g. b1: 16 CTAs of 8 rows would leave
//    most SMs idle): the 8 warps take every 8th piece, each lane 16 dims, and
//    the warps' sums meet in shared memory in a fixed order (one warp per row
//    in sequence is latency-bound on a request split over every worker).
// Either way the bits depend only on the number of pieces of the request.

// out[b, row rr, dims d, d+1] (and lse when `with_lse`).
__device__ __forceinline__ void store_out(const DecodeParams& p, int b, int rr, int d, float o0,
                                          float o1, bool with_lse, float lse) {
  const int h = rr % p.h_q;
  int tb, s;
  decode::token_coords(p, b, rr / p.h_q, &tb, &s);
  const int64_t off = tb * p.out_stride_b + s * p.out_stride_s + h * p.out_stride_h + d;
  if (p.out_f32)
    *reinterpret_cast<float2*>(static_cast<float*>(p.out) + off) = make_float2(o0, o1);
  else
    *reinterpret_cast<uint32_t*>(static_cast<__nv_bfloat16*>(p.out) + off) =
        ptx::pack_bf16x2(o0, o1);
  if (with_lse) p.lse[tb * p.lse_stride_b + h * p.lse_stride_h + s * p.lse_stride_s] = lse;
}

// Row rr of request b (n pieces from slot_base) by one warp.
__device__ __forceinline__ void combine_row_warp(const DecodeParams& p, int b, int rr, int n,
                                                 int slot_base, int lane) {
  const float* plse = p.partial_lse + int64_t(slot_base) * p.rows + rr;
  float mx = -INFINITY;
  bool nan = false;
  for (int i = lane; i < n; i += 32) {
    const float v = plse[int64_t(i) * p.rows];
    nan |= isnan(v);
    mx = fmaxf(mx, v);
  }
  nan = __any_sync(0xffffffffu, nan);
  for (int m = 16; m > 0; m /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, m));
  float sum = 0.f;
  if (mx != -INFINITY)
    for (int i = lane; i < n; i += 32) sum += expf(plse[int64_t(i) * p.rows] - mx);
  for (int m = 16; m > 0; m /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, m);
  float4 acc[4] = {};
  if (mx != -INFINITY) {
    const float inv = 1.f / sum;
    const float* po = p.partial_out + (int64_t(slot_base) * p.rows + rr) * decode::kDv + lane * 4;
    const int64_t stride = int64_t(p.rows) * decode::kDv;  // from one piece's row to the next's
#pragma unroll 4
    for (int i = 0; i < n; ++i) {
      const float wgt = expf(plse[int64_t(i) * p.rows] - mx) * inv;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float4 v = *reinterpret_cast<const float4*>(po + i * stride + 128 * k);
        acc[k].x += wgt * v.x;
        acc[k].y += wgt * v.y;
        acc[k].z += wgt * v.z;
        acc[k].w += wgt * v.w;
      }
    }
  }
  const float lse = nan ? NAN : mx == -INFINITY ? -INFINITY : mx + logf(sum);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float4 v = nan ? make_float4(NAN, NAN, NAN, NAN) : acc[k];
    const int d = lane * 4 + 128 * k;
    store_out(p, b, rr, d, v.x, v.y, lane == 0 && k == 0, lse);
    store_out(p, b, rr, d + 2, v.z, v.w, false, lse);
  }
}

// Row rr of request b by the whole CTA (8 warps over the pieces).
__device__ __forceinline__ void combine_row_cta(const DecodeParams& p, int b, int rr, int n,
                                                int slot_base) {
  __shared__ float s_red[kCombineWarps];
  __shared__ float s_acc[kCombineWarps][decode::kDv];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const float* plse = p.partial_lse + int64_t(slot_base) * p.rows + rr;

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
      const float* po = p.partial_out + (int64_t(slot_base + i) * p.rows + rr) * decode::kDv;
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
  store_out(p, b, rr, d, o0, o1, tid == 0, lse);
}

// grid (B, ceil(rows / rows_per_cta)); rows_per_cta is 1 or kCombineWarps.
__global__ void __launch_bounds__(kCombineThreads)
    split_combine_kernel(const DecodeParams p, int rows_per_cta) {
  // A programmatic dependent of the main kernel (pdl.hpp): its partials and
  // direct rows are visible after the wait. The next kernel in the stream (the
  // next layer's main kernel) may be scheduled from here; it waits itself.
  grid_dependency_wait();
  grid_launch_dependents();
  const int b = blockIdx.x;
  const RequestSplit rs = p.req_split[b];
  if (rs.num_pieces <= 1) return;
  if (rows_per_cta == 1) {
    combine_row_cta(p, b, blockIdx.y, rs.num_pieces, rs.slot_base);
    return;
  }
  const int rr = blockIdx.y * kCombineWarps + threadIdx.x / 32;
  if (rr < p.rows) combine_row_warp(p, b, rr, rs.num_pieces, rs.slot_base, threadIdx.x % 32);
}

}  // namespace

cudaError_t launch_combine(const DecodeParams& p, cudaStream_t stream) {
  // One CTA per SM of the main kernel's grid (workers x 64-row blocks): the
  // 8-row CTAs where they still fill the GPU.
  const int64_t main_ctas = int64_t(p.num_workers) * ((p.rows + 63) / 64);
  const int64_t warp_ctas = int64_t(p.B) * ((p.rows + kCombineWarps - 1) / kCombineWarps);
  const int rows_per_cta = p.batch_invariant || warp_ctas >= main_ctas ? kCombineWarps : 1;
  const int row_ctas = (p.rows + rows_per_cta - 1) / rows_per_cta;
  return launch_dependent(split_combine_kernel, dim3(p.B, row_ctas), dim3(kCombineThreads), 0,
                          stream, p, rows_per_cta);
}

}  // namespace mla::cuda::split
