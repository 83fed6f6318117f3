// Kernel-level description of sparse absorbed attention (DSA stage 4/5):
// every query attends only to the keys its index list names. It describes
// sparse decode (paged cache, bf16 or fp8_ds_mla entries) and sparse prefill
// (a flat bf16 kv array = pages of one token each) alike; sparse_cuda.cpp
// builds it once from the API arguments and hands it to the chosen kernel.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "mla/dims.hpp"
#include "mla/status.hpp"

namespace mla::cuda::sparse {

// Query row (b, i) of q [B, s_q, h_q, 576] bf16 attends to the keys at global
// slots indices[b][i][0 .. n_b), n_b = topk_length ? min(topk_length[b], topk)
// : topk; -1 (and any slot outside [0, num_slots)) is skipped and never read.
// out [B, s_q, h_q, 512] bf16, lse [B, h_q, s_q] f32 (strides below, elements).
// A query with no key gets out 0 and lse -inf.
struct SparseAttnParams {
  const void* q = nullptr;  // bf16
  int64_t q_sb = 0, q_ss = 0, q_sh = kDqk;
  int batch = 0, s_q = 1, h_q = 128;
  const int32_t* indices = nullptr;
  int64_t idx_sb = 0, idx_ss = 0;
  int topk = 0;
  const int32_t* topk_length = nullptr;
  // the cache: entry of slot s at kv + (s / page_size) * page_stride + (s % page_size) *
  // token_stride
  const uint8_t* kv = nullptr;
  bool fp8 = false;                           // fp8_ds_mla 656-byte entries, else 576 bf16
  const float* k_scale = nullptr;             // not null: fp8_e4m3 576-byte entries with this scale
  int64_t page_stride = 0, token_stride = 0;  // bytes
  int64_t page_size = 64;
  int64_t num_slots = 0;
  float softmax_scale = 0.f;
  void* out = nullptr;  // bf16
  int64_t out_sb = 0, out_ss = 0, out_sh = kDv;
  float* lse = nullptr;
  int64_t lse_sb = 0, lse_sh = 0, lse_ss = 0;
};

// The mma_sync kernel (sparse_mma.cu). Scratch for splitting each query's key
// list over several CTAs when the batch alone does not fill the GPU (f32
// partial outputs + their lse); without it (workspace null or short) no split
// is made (slower on small batches, same result). h_q a multiple of 16 and
// batch * s_q <= 65535 (the caller checks).
size_t sparse_mma_workspace_size(const SparseAttnParams& p);
Status launch_sparse_mma(const SparseAttnParams& p, void* workspace, size_t workspace_bytes,
                         cudaStream_t stream);

}  // namespace mla::cuda::sparse
