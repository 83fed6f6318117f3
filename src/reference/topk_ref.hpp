// CPU reference of token top-k (mla/topk.hpp).
#pragma once
#include <cstdint>
#include <vector>

#include "mla/topk.hpp"

namespace mla::reference {

// The k best positions of scores[0, n), by the order of mla/topk.hpp
// (descending score, lower position first on ties, -inf/NaN never selected).
// Returns at most k positions.
std::vector<int64_t> topk_positions(const double* scores, int64_t n, int64_t k);

Status topk_indices(const TopkArgs& args);

}  // namespace mla::reference
