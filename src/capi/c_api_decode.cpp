// C ABI of the absorbed decode (mla/decode.hpp).
#include "capi/capi_common.hpp"
#include "mla/decode.hpp"

using namespace mla;
using namespace mla::capi;

namespace {

// The decode call's C arguments as DecodeArgs and, where `o` is given, DecodeOptions
// (mla_decode_partial takes no options).
Status to_decode_args(const mla_tensor* q, const mla_tensor* kv, int32_t kv_format,
                      const mla_tensor* block_table, const mla_tensor* cache_seqlens,
                      float softmax_scale, int32_t causal, const mla_tensor* out,
                      const mla_tensor* lse, DecodeArgs* a, int32_t batch_invariant = 0,
                      DecodeOptions* o = nullptr) {
  MLA_TRY(to_view(q, "q", &a->q));
  MLA_TRY(to_cache(kv, kv_format, "kv", &a->kv));
  MLA_TRY(to_views({MLA_VIEW(*a, block_table), MLA_VIEW(*a, cache_seqlens), MLA_VIEW(*a, out),
                    MLA_VIEW(*a, lse)}));
  a->softmax_scale = softmax_scale;
  a->causal = causal != 0;
  if (o != nullptr) o->batch_invariant = batch_invariant != 0;
  return Status::Ok();
}

}  // namespace

extern "C" {

int32_t mla_decode_workspace_size(const mla_tensor* q, const mla_tensor* kv, int32_t kv_format,
                                  const mla_tensor* block_table, const mla_tensor* cache_seqlens,
                                  float softmax_scale, int32_t causal, const mla_tensor* out,
                                  const mla_tensor* lse, int32_t batch_invariant, size_t* bytes) {
  return guarded([&] {
    DecodeArgs a;
    DecodeOptions o;
    MLA_TRY(to_decode_args(q, kv, kv_format, block_table, cache_seqlens, softmax_scale, causal, out,
                           lse, &a, batch_invariant, &o));
    if (bytes == nullptr) return Status(Errc::invalid_value, "bytes: null pointer");
    return decode_workspace_size(a, o, bytes);
  });
}

int32_t mla_decode(const mla_tensor* q, const mla_tensor* kv, int32_t kv_format,
                   const mla_tensor* block_table, const mla_tensor* cache_seqlens,
                   float softmax_scale, int32_t causal, const mla_tensor* out,
                   const mla_tensor* lse, int32_t batch_invariant, void* workspace,
                   size_t workspace_bytes, void* stream) {
  return guarded([&] {
    DecodeArgs a;
    DecodeOptions o;
    MLA_TRY(to_decode_args(q, kv, kv_format, block_table, cache_seqlens, softmax_scale, causal, out,
                           lse, &a, batch_invariant, &o));
    return mla::mla_decode(a, o, Workspace{workspace, workspace_bytes}, to_context(stream));
  });
}

int32_t mla_decode_plan(const mla_tensor* q, const mla_tensor* kv, int32_t kv_format,
                        const mla_tensor* block_table, const mla_tensor* cache_seqlens,
                        float softmax_scale, int32_t causal, const mla_tensor* out,
                        const mla_tensor* lse, int32_t batch_invariant, void* workspace,
                        size_t workspace_bytes, void* stream, mla_decode_plan_info* plan) {
  return guarded([&] {
    MLA_TRY(expect_pointer(plan, "plan"));
    DecodeArgs a;
    MLA_TRY(to_decode_args(q, kv, kv_format, block_table, cache_seqlens, softmax_scale, causal, out,
                           lse, &a));
    DecodeOptions o;
    o.batch_invariant = batch_invariant != 0;
    DecodePlan p;
    MLA_TRY(mla::decode_plan(a, o, Workspace{workspace, workspace_bytes}, &p, to_context(stream)));
    *plan = to_plan_info(p);
    return Status::Ok();
  });
}

int32_t mla_decode_planned(const mla_tensor* q, const mla_tensor* kv, int32_t kv_format,
                           const mla_tensor* block_table, const mla_tensor* cache_seqlens,
                           float softmax_scale, int32_t causal, const mla_tensor* out,
                           const mla_tensor* lse, int32_t batch_invariant,
                           const mla_decode_plan_info* plan, void* workspace,
                           size_t workspace_bytes, void* stream) {
  return guarded([&] {
    MLA_TRY(expect_pointer(plan, "plan"));
    DecodeArgs a;
    MLA_TRY(to_decode_args(q, kv, kv_format, block_table, cache_seqlens, softmax_scale, causal, out,
                           lse, &a));
    const DecodePlan p = from_plan_info(*plan);
    DecodeOptions o;
    o.batch_invariant = batch_invariant != 0;
    o.plan = &p;
    return mla::mla_decode(a, o, Workspace{workspace, workspace_bytes}, to_context(stream));
  });
}

int32_t mla_decode_partial(const mla_tensor* q, const mla_tensor* kv, int32_t kv_format,
                           const mla_tensor* block_table, const mla_tensor* cache_seqlens,
                           float softmax_scale, int32_t causal, const mla_tensor* kv_begin,
                           const mla_tensor* kv_end, const mla_tensor* out, const mla_tensor* lse,
                           void* stream) {
  return guarded([&] {
    DecodePartialArgs a;
    MLA_TRY(to_decode_args(q, kv, kv_format, block_table, cache_seqlens, softmax_scale, causal, out,
                           lse, &a.base));
    MLA_TRY(to_views({MLA_VIEW(a, kv_begin), MLA_VIEW(a, kv_end)}));
    return mla::mla_decode_partial(a, to_context(stream));
  });
}

int32_t mla_merge_attn_partials(const mla_tensor* partial_out, const mla_tensor* partial_lse,
                                const mla_tensor* out, const mla_tensor* lse, void* stream) {
  return guarded([&] {
    MergeArgs a;
    MLA_TRY(to_views(
        {MLA_VIEW(a, partial_out), MLA_VIEW(a, partial_lse), MLA_VIEW(a, out), MLA_VIEW(a, lse)}));
    return mla::merge_attn_partials(a, to_context(stream));
  });
}

}  // extern "C"
