// The split-KV schedule and combine of the decode kernels (dense and sparse
// decode run the same three launches: schedule -> main kernel -> combine, on
// one DecodeParams). Nothing here synchronises or allocates: the schedule is
// computed on the device from the lengths in device memory, so a call can be
// captured in a CUDA graph and replayed with new lengths.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/decode/decode_params.hpp"
#include "mla/decode.hpp"

namespace mla::cuda::split {

// Workspace regions for B requests of `rows` query rows on P workers
// (token_lengths: the Indexed key source's token_len array too), and the
// params' pointers into a workspace of that layout; the schedule regions
// [0, L.plan_bytes) into `plan` instead when it is not null (a plan made
// earlier by the schedule kernel for the same lengths and shapes).
WorkspaceLayout workspace_layout(int64_t B, int64_t rows, int64_t P, bool batch_invariant,
                                 bool token_lengths);
void bind_workspace(decode::DecodeParams* p, const WorkspaceLayout& L, void* workspace,
                    const void* plan = nullptr);
// The device-dependent half of a plan's misuse checks (the API layer checks the
// shapes): made for these workers and this layout, aligned. `what` names the
// argument in the error (opts.plan, plan).
Status check_plan(const DecodePlan& plan, const WorkspaceLayout& L, int64_t num_workers,
                  const char* what);

// One CTA: cache lengths -> pieces, partial slots and worker ranges.
cudaError_t launch_schedule(const decode::DecodeParams& p, cudaStream_t stream);
// Merges the split requests' partials (split_combine.cu: 8 query rows per
// CTA, or one where few requests would leave the GPU otherwise idle).
// Launched as a programmatic dependent of the main kernel (pdl.hpp).
cudaError_t launch_combine(const decode::DecodeParams& p, cudaStream_t stream);

}  // namespace mla::cuda::split
