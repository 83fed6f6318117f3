// C ABI of the lightning indexer (mla/indexer.hpp) and of the prefill select
// (mla/indexer_select.hpp).
#include "capi/capi_common.hpp"
#include "mla/indexer.hpp"
#include "mla/indexer_select.hpp"

using namespace mla;
using namespace mla::capi;

static_assert(MLA_TOPK_BEST_FIRST == int(TopkOrder::best_first) &&
                  MLA_TOPK_BY_POSITION == int(TopkOrder::by_position),
              "MLA_TOPK_* mirror mla::TopkOrder");
static_assert(MLA_INDEXER_SELECT_AUTOMATIC == int(IndexerSelectPath::automatic) &&
                  MLA_INDEXER_SELECT_UNFUSED == int(IndexerSelectPath::unfused) &&
                  MLA_INDEXER_SELECT_FUSED == int(IndexerSelectPath::fused),
              "MLA_INDEXER_SELECT_* mirror mla::IndexerSelectPath");

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

namespace {

Status select_args(const mla_tensor* q8, const mla_tensor* w_folded, const mla_tensor* k8,
                   const mla_tensor* k_scale, const mla_tensor* k_start, const mla_tensor* k_end,
                   int32_t k, int32_t order, int32_t path, int64_t capacity,
                   const mla_tensor* indices, IndexerSelectPrefillArgs* a,
                   IndexerSelectOptions* o) {
  MLA_TRY(
      to_views({MLA_VIEW(*a, q8), MLA_VIEW(*a, w_folded), MLA_VIEW(*a, k8), MLA_VIEW(*a, k_scale),
                MLA_VIEW(*a, k_start), MLA_VIEW(*a, k_end), MLA_VIEW(*a, indices)}));
  a->k = k;
  a->order = static_cast<TopkOrder>(order);  // a value outside the enum is named by the check
  o->path = static_cast<IndexerSelectPath>(path);
  o->capacity = capacity;
  return Status::Ok();
}

}  // namespace

extern "C" {

int32_t mla_indexer_select_prefill_workspace_size(const mla_tensor* q8, const mla_tensor* w_folded,
                                                  const mla_tensor* k8, const mla_tensor* k_scale,
                                                  const mla_tensor* k_start,
                                                  const mla_tensor* k_end, int32_t k, int32_t order,
                                                  int32_t path, int64_t capacity,
                                                  const mla_tensor* indices, size_t* bytes) {
  return guarded([&] {
    IndexerSelectPrefillArgs a;
    IndexerSelectOptions o;
    MLA_TRY(select_args(q8, w_folded, k8, k_scale, k_start, k_end, k, order, path, capacity,
                        indices, &a, &o));
    return indexer_select_prefill_workspace_size(a, o, bytes);
  });
}

int32_t mla_indexer_select_prefill(const mla_tensor* q8, const mla_tensor* w_folded,
                                   const mla_tensor* k8, const mla_tensor* k_scale,
                                   const mla_tensor* k_start, const mla_tensor* k_end, int32_t k,
                                   int32_t order, int32_t path, int64_t capacity,
                                   const mla_tensor* indices, void* workspace,
                                   size_t workspace_bytes, void* stream) {
  return guarded([&] {
    IndexerSelectPrefillArgs a;
    IndexerSelectOptions o;
    MLA_TRY(select_args(q8, w_folded, k8, k_scale, k_start, k_end, k, order, path, capacity,
                        indices, &a, &o));
    return indexer_select_prefill(a, o, Workspace{workspace, workspace_bytes}, to_context(stream));
  });
}

}  // extern "C"
