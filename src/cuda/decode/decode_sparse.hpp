// Sparse (DSA) decode on the wgmma decode kernel: the dense decode's
// schedule -> main -> combine with the Indexed key source (decode_keys.cuh).
// Every query token is its own request (h_q rows, no causal mask) whose keys
// are its index list; the scheduler derives the per-token key counts from
// topk_length on the GPU, so nothing synchronises (graph-capturable).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "cuda/dsa/sparse_launch.hpp"
#include "mla/status.hpp"

namespace mla::cuda::decode {

// Whether this path takes p: h_q a multiple of 16 (rows of 64 per CTA,
// masked below 64) and bf16 output (SparseAttnParams' contract).
bool sparse_wgmma_supports(const dsa::SparseAttnParams& p);
// Whether mla::sparse_decode runs this path ("sparse v2") rather than the
// mma.sync kernel of sparse_attn.cu: every p it supports. Measured on the H200
// (docs/perf-log.md, "sparse v2"): 1.6-2.6x the old kernel at h 16 to 128,
// also at h 16/32 where 3/4 or 1/2 of the 64 wgmma rows are masked.
// MLA_SPARSE_KERNEL=mma forces the old kernel (A/B runs, tests).
bool sparse_wgmma_chosen(const dsa::SparseAttnParams& p);
// Workspace of launch_sparse_wgmma (256-byte aligned): the decode schedule,
// fp32 partials of split tokens and the per-token key counts.
Status sparse_wgmma_workspace_size(const dsa::SparseAttnParams& p, size_t* bytes);
Status launch_sparse_wgmma(const dsa::SparseAttnParams& p, void* workspace, size_t workspace_bytes,
                           cudaStream_t stream);

}  // namespace mla::cuda::decode
