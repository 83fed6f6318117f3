// Token top-k's argument checks that more than one entry point uses:
// topk_indices and indexer_select_prefill take the same k, order and indices.
#pragma once
#include <cstdint>

#include "mla/topk.hpp"

namespace mla::detail {

// k a multiple of kTopkGranule in [kTopkGranule, kTopkMax]; order a TopkOrder.
Status validate_topk_k_order(int32_t k, TopkOrder order);
// indices [rows, k] i32 (`symbolic` names the dims in the message), inner dim
// dense, on the device of `like` (the op's first input, named like_name).
Status validate_topk_indices(const TensorView& indices, int64_t rows, int32_t k,
                             const char* symbolic, const TensorView& like, const char* like_name);

}  // namespace mla::detail
