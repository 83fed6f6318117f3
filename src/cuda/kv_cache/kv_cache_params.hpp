// Parameters and launcher of the cache-append kernel (append_kernel.cu).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace mla::cuda::kv_cache {

struct AppendParams {
  const void* c_kv;  // [T, 512] f32 or bf16 (element strides below)
  int64_t c_kv_stride_t, c_kv_stride_d;
  const void* k_rope;  // [T, 64], same dtype as c_kv
  int64_t rope_stride_t, rope_stride_d;
  bool bf16_in;
  const int64_t* slots;  // [T]
  int64_t slots_stride;
  int64_t T;
  uint8_t* cache;
  int64_t page_stride_bytes, token_stride_bytes;
  int64_t num_pages, page_size;
  int32_t format;      // mla::KvFormat
  const float* scale;  // fp8_e4m3: the per-tensor scale (device), else null
};

cudaError_t launch_append(const AppendParams& p, cudaStream_t stream);

}  // namespace mla::cuda::kv_cache
