// CUDA backend of token top-k (mla/topk.hpp), called by src/api/topk.cpp for
// CUDA tensors after validation. Same order as the reference (descending
// logit, lower position first on ties, -inf/NaN never chosen, -1 padding).
#pragma once
#include "mla/topk.hpp"

namespace mla::cuda {
Status topk_indices(const TopkArgs& args, const ExecContext& ctx);
}  // namespace mla::cuda
