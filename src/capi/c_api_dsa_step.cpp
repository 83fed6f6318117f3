// C ABI of the DSA decode step and its threshold (mla/dsa.hpp).
#include "capi/capi_common.hpp"
#include "mla/dsa.hpp"
#include "mla/plan.hpp"

using namespace mla;
using namespace mla::capi;

static_assert(MLA_DSA_PATH_AUTOMATIC == int(DsaPath::automatic) &&
                  MLA_DSA_PATH_DENSE == int(DsaPath::dense) &&
                  MLA_DSA_PATH_SPARSE == int(DsaPath::sparse),
              "MLA_DSA_PATH_* mirror mla::DsaPath");

namespace {

Status to_policy(const mla_dsa_policy* p, DsaPolicy* out) {
  MLA_TRY(expect_pointer(p, "policy"));
  out->topk = p->topk;
  out->path = static_cast<DsaPath>(p->path);
  out->dense_below = p->dense_below;
  out->dense_options.batch_invariant = p->batch_invariant != 0;
  return Status::Ok();
}

Status to_step_args(const mla_tensor* q, const mla_tensor* kv, int32_t kv_format,
                    const mla_tensor* block_table, const mla_tensor* cache_seqlens,
                    int64_t max_seqlen, const mla_tensor* index_q8,
                    const mla_tensor* index_w_folded, const mla_tensor* index_cache,
                    const mla_tensor* index_block_table, float softmax_scale, const mla_tensor* out,
                    const mla_tensor* lse, const mla_dsa_policy* policy, DsaDecodeArgs* a,
                    DsaPolicy* p) {
  MLA_TRY(to_view(q, "q", &a->q));
  MLA_TRY(to_cache(kv, kv_format, "kv", &a->kv));
  MLA_TRY(to_views({MLA_VIEW(*a, block_table), MLA_VIEW(*a, cache_seqlens)}));
  a->max_seqlen = max_seqlen;
  MLA_TRY(to_views({MLA_VIEW(*a, index_q8), MLA_VIEW(*a, index_w_folded)}));
  MLA_TRY(to_view(index_cache, "index_cache", &a->index_cache.data));
  MLA_TRY(to_view(index_block_table, "index_block_table", &a->index_block_table));
  a->softmax_scale = softmax_scale;
  MLA_TRY(to_views({MLA_VIEW(*a, out), MLA_VIEW(*a, lse)}));
  return to_policy(policy, p);
}

}  // namespace

extern "C" {

void mla_dsa_default_policy(mla_dsa_policy* policy) {
  if (policy == nullptr) return;
  const DsaPolicy d;
  policy->topk = d.topk;
  policy->path = static_cast<int32_t>(d.path);
  policy->dense_below = d.dense_below;
  policy->batch_invariant = d.dense_options.batch_invariant ? 1 : 0;
}

int32_t mla_dsa_decode_path(int64_t max_seqlen, int32_t kv_format, const mla_dsa_policy* policy,
                            int32_t* path) {
  return guarded([&] {
    DsaPolicy p;
    MLA_TRY(to_policy(policy, &p));
    MLA_TRY(expect_pointer(path, "path"));
    DsaDecodeArgs a;
    MLA_TRY(to_kv_format(kv_format, "kv_format", &a.kv.format));
    a.max_seqlen = max_seqlen;
    DsaPath out = DsaPath::automatic;
    MLA_TRY(dsa_decode_path(a, p, &out));
    *path = static_cast<int32_t>(out);
    return Status::Ok();
  });
}

int32_t mla_dsa_decode_workspace_size(const mla_tensor* q, const mla_tensor* kv, int32_t kv_format,
                                      const mla_tensor* block_table,
                                      const mla_tensor* cache_seqlens, int64_t max_seqlen,
                                      const mla_tensor* index_q8, const mla_tensor* index_w_folded,
                                      const mla_tensor* index_cache,
                                      const mla_tensor* index_block_table, float softmax_scale,
                                      const mla_tensor* out, const mla_tensor* lse,
                                      const mla_dsa_policy* policy, size_t* bytes) {
  return guarded([&] {
    DsaDecodeArgs a;
    DsaPolicy p;
    MLA_TRY(to_step_args(q, kv, kv_format, block_table, cache_seqlens, max_seqlen, index_q8,
                         index_w_folded, index_cache, index_block_table, softmax_scale, out, lse,
                         policy, &a, &p));
    return dsa_decode_workspace_size(a, p, bytes);
  });
}

int32_t mla_dsa_decode(const mla_tensor* q, const mla_tensor* kv, int32_t kv_format,
                       const mla_tensor* block_table, const mla_tensor* cache_seqlens,
                       int64_t max_seqlen, const mla_tensor* index_q8,
                       const mla_tensor* index_w_folded, const mla_tensor* index_cache,
                       const mla_tensor* index_block_table, float softmax_scale,
                       const mla_tensor* out, const mla_tensor* lse, const mla_dsa_policy* policy,
                       void* workspace, size_t workspace_bytes, void* stream) {
  return guarded([&] {
    DsaDecodeArgs a;
    DsaPolicy p;
    MLA_TRY(to_step_args(q, kv, kv_format, block_table, cache_seqlens, max_seqlen, index_q8,
                         index_w_folded, index_cache, index_block_table, softmax_scale, out, lse,
                         policy, &a, &p));
    return dsa_decode(a, p, Workspace{workspace, workspace_bytes}, to_context(stream));
  });
}

int32_t mla_dsa_dense_threshold(const char* gpu, const char* calibration_json, const char* model,
                                const char* kv, int32_t heads, int32_t new_tokens, int32_t topk,
                                int32_t batch, int64_t* tokens) {
  return guarded([&] {
    plan::DsaThresholdOptions o;
    if (model != nullptr) o.model = model;
    if (kv != nullptr) o.kv = kv;
    o.heads = heads;
    o.new_tokens = new_tokens;
    o.topk = topk;
    o.batch = batch;
    return plan::dsa_dense_threshold(gpu, calibration_json, tokens, o);
  });
}

}  // extern "C"
