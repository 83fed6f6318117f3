// The small elementwise kernels of the attention layer's GPU composition
// (src/cuda/layer/layer_cuda.cpp): everything between the cuBLAS projections
// and the library's attention ops. Activations are f32 rows with a row stride
// (in elements); each launcher queues one kernel on `stream`.
#pragma once
#include <cstdint>

#include "mla/status.hpp"

namespace mla::cuda::layer {

// positions[t] (i64) and slots[t] (i64) of token t = b * s_q + i:
// pos = cache_seqlens[b] - s_q + i, slot = block_table[b][pos / page] * page + pos % page.
Status token_slots(const int32_t* cache_seqlens, const int32_t* block_table,
                   int64_t block_table_stride, int64_t B, int64_t s_q, int64_t page,
                   int64_t* positions, int64_t* slots, void* stream);

// In place over n rows of `dim` values at x + r * stride:
// x * rsqrt(mean(x^2) + eps) * weight (weight f32 [dim]).
Status rms_norm(float* x, int64_t n, int64_t dim, int64_t stride, const float* weight, float eps,
                void* stream);
// (x - mean) * rsqrt(var + eps) * weight + bias, in place.
Status layer_norm(float* x, int64_t n, int64_t dim, int64_t stride, const float* weight,
                  const float* bias, float eps, void* stream);

// RoPE on `heads` vectors per token: dims [offset, offset + 64) of each vector of
// width `width` (token row stride heads * width), rotated by positions[t] *
// inv_freq[j] times `attn_factor`; half_split pairs (j, j + 32), else (2j, 2j + 1).
struct RopeTable {
  double inv_freq[32];  // double: positions reach 1e5+, an f32 frequency would shift the phase
  float attn_factor;
};
Status rope(float* x, int64_t n_tokens, int64_t heads, int64_t width, int64_t offset,
            const int64_t* positions, const RopeTable& table, bool half_split, void* stream);

// In place: the Sylvester-order Hadamard transform of each contiguous row of 128
// values, times 128^-0.5 (n_rows rows).
Status hadamard128(float* x, int64_t n_rows, void* stream);

// dst[r, c] (bf16, row stride dst_stride) = src[r, c] (f32, row stride src_stride),
// c < cols, for n rows.
Status to_bf16(const float* src, int64_t src_stride, void* dst, int64_t dst_stride, int64_t n,
               int64_t cols, void* stream);

}  // namespace mla::cuda::layer
