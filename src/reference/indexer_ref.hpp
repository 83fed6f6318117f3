// CPU reference of the lightning indexer (mla/indexer.hpp): the paged key
// cache, query quantisation, and the logits in fp64.
#pragma once
#include <cstdint>

#include "mla/indexer.hpp"

namespace mla::reference {

// Codes (128 bytes) and scale of the key at global slot page * 64 + offset.
const uint8_t* indexer_key_codes(const IndexerCacheView& cache, int64_t slot);
uint8_t* indexer_key_codes_mut(const IndexerCacheView& cache, int64_t slot);
float indexer_key_scale(const IndexerCacheView& cache, int64_t slot);
void store_indexer_key_scale(const IndexerCacheView& cache, int64_t slot, float scale);

// The formula, for one (query token, key): q8 is [64][128] e4m3 values, w the
// 64 folded weights, k8 the key's 128 e4m3 values. The dots are exact in fp64
// (e4m3 x e4m3 has 8 significant bits; 128 of them sum exactly).
double indexer_logit(const double* q8, const double* w, const double* k8, double k_scale);

// CPU backends (arguments validated).
Status append_indexer_keys(const AppendIndexerKeysArgs& args);
Status quantize_indexer_query(const QuantizeIndexerQueryArgs& args);
Status indexer_logits_decode(const IndexerLogitsDecodeArgs& args);
Status indexer_logits_prefill(const IndexerLogitsPrefillArgs& args);

}  // namespace mla::reference
