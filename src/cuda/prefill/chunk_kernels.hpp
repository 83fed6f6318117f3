// Small kernels of the chunked prefill path: gather a range of a request's
// tokens out of the paged latent cache into a dense bf16 [n, 576] block (fp8
// entries dequantised), and merge attention partials by log-sum-exp.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace mla::cuda::prefill {

struct GatherLatentParams {
  const unsigned char* cache = nullptr;  // page 0, byte address
  int64_t page_stride_bytes = 0;
  int32_t page_size = 0;
  bool fp8 = false;                          // fp8_ds_mla entries (656 B) instead of bf16 (1152 B)
  const int32_t* block_table_row = nullptr;  // the request's page ids (device)
  int64_t first_token = 0;                   // gather tokens [first_token, first_token + n)
  int64_t n = 0;
  void* out = nullptr;  // [n, 576] bf16 dense: c_kv 512 then k_rope 64
};
cudaError_t gather_latent(const GatherLatentParams& p, cudaStream_t stream);

// acc <- merge(acc, part) row by row, rows = (token, head) pairs:
//   acc_out/part_out [T, h, 128] f32 dense, acc_lse/part_lse [h, T] f32.
// When final_out is not null the merged row is written there as bf16 instead
// (final_out [T, h, 128] with the given strides), acc_lse still updated.
struct MergeParams {
  float* acc_out = nullptr;
  float* acc_lse = nullptr;
  const float* part_out = nullptr;
  const float* part_lse = nullptr;
  int64_t tokens = 0;
  int32_t heads = 0;
  void* final_out = nullptr;
  int64_t final_row_stride = 0, final_head_stride = 0;
  float* final_lse = nullptr;  // [h, T] with lse_head_stride, may be null
  int64_t final_lse_head_stride = 0;
};
cudaError_t merge_partials(const MergeParams& p, cudaStream_t stream);

}  // namespace mla::cuda::prefill
