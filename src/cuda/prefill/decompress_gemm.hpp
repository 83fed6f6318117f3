// Latent -> per-head decompression for non-absorbed prefill, as one bf16 GEMM
// through cuBLAS: out[n, h*128 + j] = sum_c c_kv[n, c] * W[h, j, c].
#pragma once
#include <cstdint>

#include "mla/status.hpp"

namespace mla::cuda::prefill {

struct DecompressGemm {
  const void* c_kv = nullptr;  // [N, d_c] bf16, row stride c_kv_row_stride (elements)
  int64_t c_kv_row_stride = 0;
  const void* w = nullptr;  // [rows_out, d_c] bf16, dense: W_UK or W_UV viewed as [h*128, d_c]
  void* out = nullptr;      // [N, rows_out] bf16, row stride out_row_stride (elements)
  int64_t out_row_stride = 0;
  int64_t n = 0;         // tokens
  int64_t rows_out = 0;  // h * 128
  int64_t d_c = 0;       // 512
};

// Runs on `stream` (cudaStream_t as void*). Uses one cuBLAS handle per host
// thread and device, created on first use.
Status decompress_gemm(const DecompressGemm& g, void* stream);

}  // namespace mla::cuda::prefill
