// The lightning indexer's argument checks that more than one entry point uses:
// indexer_logits_prefill and indexer_select_prefill take the same inputs.
#pragma once
#include <cstdint>

#include "mla/indexer.hpp"

namespace mla::detail {

// q8, w_folded, k8, k_scale, k_start, k_end of the prefill form (shapes, dtypes,
// layouts, one device); `logits` is not read.
Status validate_prefill_inputs(const IndexerLogitsPrefillArgs& a);
// k_start, k_end [T]: 0 <= k_start[t] <= k_end[t] <= N (host views).
Status check_key_ranges(const TensorView& k_start, const TensorView& k_end, int64_t N);

}  // namespace mla::detail
