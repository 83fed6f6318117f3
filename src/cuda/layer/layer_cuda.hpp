// The attention layer on the GPU (mla/layer.hpp): cuBLAS for the projections
// and the W_UK / W_UV per-head products, small kernels for norms, RoPE and the
// Hadamard rotation (layer_kernels.hpp), and the library's CUDA attention,
// cache and indexer ops. Arguments validated by src/api/layer.cpp; CUDA needs
// hidden and the matrix weights in bf16, the norm weights in f32, contiguous.
#pragma once
#include <cstddef>

#include "mla/layer.hpp"

namespace mla::cuda {

Status layer_workspace_size(const LayerForwardArgs& args, size_t* bytes);
Status layer_forward(const LayerForwardArgs& args, Workspace ws, const ExecContext& ctx);

}  // namespace mla::cuda
