// CUDA backend of token top-k (mla/topk.hpp), called by src/api/topk.cpp for
// CUDA tensors after validation.
#pragma once
#include "cuda/topk/topk_params.hpp"
#include "mla/topk.hpp"

namespace mla::cuda {

// With the plan topk::choose gives for the shape and the device.
Status topk_indices(const TopkArgs& args, const ExecContext& ctx);
// With a given kernel and cluster size (tests and benchmarks run every one).
Status topk_indices(const TopkArgs& args, const ExecContext& ctx, topk::TopkPlan plan);

}  // namespace mla::cuda
