// C ABI of the lightning indexer (mla/indexer.hpp).
#include "capi/capi_common.hpp"
#include "mla/indexer.hpp"

using namespace mla;
using namespace mla::capi;

extern "C" {

int32_t mla_validate_indexer_cache(const mla_tensor* cache) {
  return guarded([&] {
    IndexerCacheView c;
    MLA_TRY(to_view(cache, "cache", &c.data));
    return validate_indexer_cache(c, "cache");
  });
}

int32_t mla_append_indexer_keys(const mla_tensor* keys, const mla_tensor* slots,
                                const mla_tensor* cache, void* stream) {
  return guarded([&] {
    AppendIndexerKeysArgs a;
    MLA_TRY(to_views({MLA_VIEW(a, keys), MLA_VIEW(a, slots)}));
    MLA_TRY(to_view(cache, "cache", &a.cache.data));
    return append_indexer_keys(a, to_context(stream));
  });
}

int32_t mla_quantize_indexer_query(const mla_tensor* q, const mla_tensor* weights,
                                   const mla_tensor* q8, const mla_tensor* w_folded, void* stream) {
  return guarded([&] {
    QuantizeIndexerQueryArgs a;
    MLA_TRY(
        to_views({MLA_VIEW(a, q), MLA_VIEW(a, weights), MLA_VIEW(a, q8), MLA_VIEW(a, w_folded)}));
    return quantize_indexer_query(a, to_context(stream));
  });
}

int32_t mla_indexer_logits_decode(const mla_tensor* q8, const mla_tensor* w_folded,
                                  const mla_tensor* cache, const mla_tensor* block_table,
                                  const mla_tensor* cache_seqlens, const mla_tensor* logits,
                                  void* stream) {
  return guarded([&] {
    IndexerLogitsDecodeArgs a;
    MLA_TRY(to_views({MLA_VIEW(a, q8), MLA_VIEW(a, w_folded)}));
    MLA_TRY(to_view(cache, "cache", &a.cache.data));
    MLA_TRY(to_views({MLA_VIEW(a, block_table), MLA_VIEW(a, cache_seqlens), MLA_VIEW(a, logits)}));
    return indexer_logits_decode(a, to_context(stream));
  });
}

int32_t mla_indexer_logits_prefill(const mla_tensor* q8, const mla_tensor* w_folded,
                                   const mla_tensor* k8, const mla_tensor* k_scale,
                                   const mla_tensor* k_start, const mla_tensor* k_end,
                                   const mla_tensor* logits, void* stream) {
  return guarded([&] {
    IndexerLogitsPrefillArgs a;
    MLA_TRY(to_views({MLA_VIEW(a, q8), MLA_VIEW(a, w_folded), MLA_VIEW(a, k8), MLA_VIEW(a, k_scale),
                      MLA_VIEW(a, k_start), MLA_VIEW(a, k_end), MLA_VIEW(a, logits)}));
    return indexer_logits_prefill(a, to_context(stream));
  });
}

}  // extern "C"
