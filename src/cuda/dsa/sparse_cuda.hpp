// CUDA backend of sparse absorbed attention (mla/sparse.hpp), called by
// src/api/sparse.cpp for CUDA tensors after its device-independent shape and
// dtype checks. The index lists and topk_length live on the GPU and are not
// read here: the kernel skips any entry outside the cache (and clamps
// topk_length to [0, topk]) instead of reading it.
#pragma once
#include <cstddef>

#include "mla/sparse.hpp"

namespace mla::cuda {
Status sparse_decode_workspace_size(const SparseDecodeArgs& args, size_t* bytes);
Status sparse_decode(const SparseDecodeArgs& args, Workspace ws, const ExecContext& ctx);
Status sparse_prefill_workspace_size(const SparsePrefillArgs& args, size_t* bytes);
Status sparse_prefill(const SparsePrefillArgs& args, Workspace ws, const ExecContext& ctx);
}  // namespace mla::cuda
