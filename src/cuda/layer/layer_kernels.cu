#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda/common/cuda_status.hpp"
#include "cuda/layer/layer_kernels.hpp"

namespace mla::cuda::layer {
namespace {

constexpr int kThreads = 256;

cudaStream_t as_stream(void* s) {
  return static_cast<cudaStream_t>(s);
}

__global__ void token_slots_kernel(const int32_t* lens, const int32_t* bt, int64_t bt_stride,
                                   int64_t B, int64_t s_q, int64_t page, int64_t* positions,
                                   int64_t* slots) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= B * s_q) return;
  const int64_t b = t / s_q, i = t % s_q;
  const int64_t pos = int64_t(lens[b]) - s_q + i;  // the host checked len >= s_q on CPU only
  positions[t] = pos;
  slots[t] = pos < 0 ? -1 : int64_t(bt[b * bt_stride + pos / page]) * page + pos % page;
}

// Block-wide sum of one value per thread (kThreads threads).
__device__ float block_sum(float v) {
  __shared__ float warp_sums[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0.f;
  for (int w = 0; w < kThreads / 32; ++w) total += warp_sums[w];
  __syncthreads();  // warp_sums is reused by the next call
  return total;
}

__global__ void rms_norm_kernel(float* x, int64_t dim, int64_t stride, const float* w, float eps) {
  float* r = x + int64_t(blockIdx.x) * stride;
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) ss += r[i] * r[i];
  const float inv = rsqrtf(block_sum(ss) / float(dim) + eps);
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) r[i] = r[i] * inv * w[i];
}

__global__ void layer_norm_kernel(float* x, int64_t dim, int64_t stride, const float* w,
                                  const float* b, float eps) {
  float* r = x + int64_t(blockIdx.x) * stride;
  float s = 0.f;
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) s += r[i];
  const float mean = block_sum(s) / float(dim);
  float v = 0.f;
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) v += (r[i] - mean) * (r[i] - mean);
  const float inv = rsqrtf(block_sum(v) / float(dim) + eps);
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) r[i] = (r[i] - mean) * inv * w[i] + b[i];
}

// One thread per (token, head, pair).
__global__ void rope_kernel(float* x, int64_t n_pairs, int64_t heads, int64_t width, int64_t offset,
                            const int64_t* positions, RopeTable table, bool half_split) {
  const int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= n_pairs) return;
  const int j = int(g % 32);
  const int64_t th = g / 32, t = th / heads;
  float* v = x + th * width + offset;
  const int ia = half_split ? j : 2 * j, ib = half_split ? j + 32 : 2 * j + 1;
  // The angle in double: positions reach 10^5-10^6 and f32 would lose the phase.
  double sn, cs;
  sincos(double(positions[t]) * table.inv_freq[j], &sn, &cs);
  const float a = v[ia], b = v[ib], m = table.attn_factor;
  v[ia] = m * (a * float(cs) - b * float(sn));
  v[ib] = m * (a * float(sn) + b * float(cs));
}

// One warp per row of 128: each lane holds 4 values (lane + 32 k); butterflies
// with partner distance < 32 use shuffles, the two larger ones stay in-lane.
__global__ void hadamard128_kernel(float* x, int64_t n_rows) {
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= n_rows) return;
  const int lane = threadIdx.x % 32;
  float* r = x + row * 128;
  float v[4];
  for (int k = 0; k < 4; ++k) v[k] = r[lane + 32 * k];
  for (int h = 1; h < 32; h <<= 1)
    for (int k = 0; k < 4; ++k) {
      const float other = __shfl_xor_sync(0xffffffffu, v[k], h);
      v[k] = (lane & h) ? other - v[k] : v[k] + other;
    }
  // distance 32: pairs (k, k+1) for k even; distance 64: pairs (k, k+2).
  for (int k = 0; k < 4; k += 2) {
    const float a = v[k], b = v[k + 1];
    v[k] = a + b;
    v[k + 1] = a - b;
  }
  for (int k = 0; k < 2; ++k) {
    const float a = v[k], b = v[k + 2];
    v[k] = a + b;
    v[k + 2] = a - b;
  }
  const float s = 0.08838834764831845f;  // 128^-0.5
  for (int k = 0; k < 4; ++k) r[lane + 32 * k] = v[k] * s;
}

__global__ void to_bf16_kernel(const float* src, int64_t ss, __nv_bfloat16* dst, int64_t ds,
                               int64_t n, int64_t cols) {
  const int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= n * cols) return;
  const int64_t r = g / cols, c = g % cols;
  dst[r * ds + c] = __float2bfloat16_rn(src[r * ss + c]);
}

unsigned blocks_for(int64_t n) {
  return unsigned((n + kThreads - 1) / kThreads);
}

}  // namespace

Status token_slots(const int32_t* lens, const int32_t* bt, int64_t bt_stride, int64_t B,
                   int64_t s_q, int64_t page, int64_t* positions, int64_t* slots, void* stream) {
  if (B * s_q == 0) return Status::Ok();
  token_slots_kernel<<<blocks_for(B * s_q), kThreads, 0, as_stream(stream)>>>(
      lens, bt, bt_stride, B, s_q, page, positions, slots);
  return check_launch("layer token_slots");
}

Status rms_norm(float* x, int64_t n, int64_t dim, int64_t stride, const float* w, float eps,
                void* stream) {
  if (n == 0) return Status::Ok();
  rms_norm_kernel<<<unsigned(n), kThreads, 0, as_stream(stream)>>>(x, dim, stride, w, eps);
  return check_launch("layer rms_norm");
}

Status layer_norm(float* x, int64_t n, int64_t dim, int64_t stride, const float* w, const float* b,
                  float eps, void* stream) {
  if (n == 0) return Status::Ok();
  layer_norm_kernel<<<unsigned(n), kThreads, 0, as_stream(stream)>>>(x, dim, stride, w, b, eps);
  return check_launch("layer layer_norm");
}

Status rope(float* x, int64_t n_tokens, int64_t heads, int64_t width, int64_t offset,
            const int64_t* positions, const RopeTable& table, bool half_split, void* stream) {
  const int64_t n_pairs = n_tokens * heads * 32;
  if (n_pairs == 0) return Status::Ok();
  rope_kernel<<<blocks_for(n_pairs), kThreads, 0, as_stream(stream)>>>(
      x, n_pairs, heads, width, offset, positions, table, half_split);
  return check_launch("layer rope");
}

Status hadamard128(float* x, int64_t n_rows, void* stream) {
  if (n_rows == 0) return Status::Ok();
  constexpr int kRowsPerBlock = kThreads / 32;
  hadamard128_kernel<<<unsigned((n_rows + kRowsPerBlock - 1) / kRowsPerBlock), kThreads, 0,
                       as_stream(stream)>>>(x, n_rows);
  return check_launch("layer hadamard128");
}

Status to_bf16(const float* src, int64_t ss, void* dst, int64_t ds, int64_t n, int64_t cols,
               void* stream) {
  if (n * cols == 0) return Status::Ok();
  to_bf16_kernel<<<blocks_for(n * cols), kThreads, 0, as_stream(stream)>>>(
      src, ss, static_cast<__nv_bfloat16*>(dst), ds, n, cols);
  return check_launch("layer to_bf16");
}

}  // namespace mla::cuda::layer
