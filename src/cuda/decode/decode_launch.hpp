// Kernel launchers of the CUDA decode (defined in the .cu files), called by
// decode_cuda.cpp once the arguments are validated and the workspace carved.
#pragma once
#include <cuda_runtime.h>

#include "cuda/decode/decode_traits.hpp"

namespace mla::cuda::decode {

// Rows of a CTA are 16 * row_tiles; row_tiles is 1, 2 or 4.
int row_tiles_for(int rows);
size_t main_kernel_smem_bytes(int row_tiles, bool fp8);

cudaError_t launch_decode_schedule(const DecodeParams& p, cudaStream_t stream);
// grid (p.num_workers, row_blocks)
cudaError_t launch_decode_main(const DecodeParams& p, int row_tiles, bool fp8, int row_blocks,
                               cudaStream_t stream);
cudaError_t launch_decode_combine(const DecodeParams& p, cudaStream_t stream);

// Workspace regions for B requests of `rows` query rows on P workers
// (token_lengths: the Indexed key source's token_len array too), and the
// params' pointers into a workspace of that layout (decode_cuda.cpp).
WorkspaceLayout decode_workspace_layout(int64_t B, int64_t rows, int64_t P, bool batch_invariant,
                                        bool token_lengths);
void bind_workspace(DecodeParams* p, const WorkspaceLayout& L, void* workspace);

}  // namespace mla::cuda::decode
