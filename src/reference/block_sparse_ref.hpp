// CPU reference of block-sparse selection (mla/block_sparse.hpp).
#pragma once
#include <cstdint>
#include <vector>

#include "mla/block_sparse.hpp"

namespace mla::reference {

// The token positions (ascending) chosen for one query with n visible keys,
// given the compressed-block scores c (c[j] for j < num_complete_blocks(n)).
std::vector<int64_t> block_sparse_positions(const BlockSparseParams& p, int64_t n,
                                            const std::vector<double>& c);

// Complete compressed blocks among n keys.
int64_t num_compressed_blocks(const BlockSparseParams& p, int64_t n);

Status block_sparse_select(const BlockSparseSelectArgs& args);

}  // namespace mla::reference
