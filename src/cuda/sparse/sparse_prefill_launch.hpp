// Host entry of the sparse prefill kernel (sparse_prefill_kernel.cuh): checks
// what only the kernel demands and launches one CTA per (query token, block of
// 64 heads). It needs no workspace: a CTA runs a token's whole list.
#pragma once
#include <cuda_runtime.h>

#include "cuda/sparse/sparse_prefill_params.hpp"
#include "mla/status.hpp"

namespace mla::cuda::sparse {

// Ok when the kernel takes p: q/kv base 16-byte aligned and every row stride a
// multiple of 8 elements (16-byte cp.async pieces), out 4-byte aligned with
// even strides (bf16 pairs), h_q >= 1, topk >= 1; else an error naming the
// argument and the value.
Status sparse_prefill_check(const SparsePrefillParams& p);
// Checks, then launches the instantiation for p.fp8.
Status launch_sparse_prefill(const SparsePrefillParams& p, cudaStream_t stream);
// One instantiation per key format (sparse_prefill_bf16.cu, sparse_prefill_fp8.cu).
template <bool kFp8>
Status launch_sparse_prefill_as(const SparsePrefillParams& p, cudaStream_t stream);

}  // namespace mla::cuda::sparse
