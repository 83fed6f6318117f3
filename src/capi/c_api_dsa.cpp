// C ABI of DSA's selection and sparse attention (mla/topk.hpp, mla/sparse.hpp).
#include "capi/capi_common.hpp"
#include "mla/sparse.hpp"
#include "mla/topk.hpp"

using namespace mla;
using namespace mla::capi;

extern "C" {

int32_t mla_topk_indices(const mla_tensor* logits, const mla_tensor* lengths, int32_t k,
                         const mla_tensor* indices, const mla_tensor* block_table,
                         int32_t page_size, int32_t rows_per_request, int64_t num_pages,
                         void* stream) {
  return guarded([&] {
    TopkArgs a;
    MLA_TRY(to_views({MLA_VIEW(a, logits), MLA_VIEW(a, lengths), MLA_VIEW(a, indices),
                      MLA_VIEW(a, block_table)}));
    a.k = k;
    a.page_size = page_size;
    a.rows_per_request = rows_per_request;
    a.num_pages = num_pages;
    return topk_indices(a, to_context(stream));
  });
}

}  // extern "C"

namespace {

Status sparse_decode_args(const mla_tensor* q, const mla_tensor* kv, int32_t kv_format,
                          const mla_tensor* indices, const mla_tensor* topk_length,
                          float softmax_scale, const mla_tensor* out, const mla_tensor* lse,
                          SparseDecodeArgs* a) {
  MLA_TRY(to_view(q, "q", &a->q));
  MLA_TRY(to_cache(kv, kv_format, "kv", &a->kv));
  MLA_TRY(to_views(
      {MLA_VIEW(*a, indices), MLA_VIEW(*a, topk_length), MLA_VIEW(*a, out), MLA_VIEW(*a, lse)}));
  a->softmax_scale = softmax_scale;
  return Status::Ok();
}

Status sparse_prefill_args(const mla_tensor* q, const mla_tensor* kv, int32_t kv_format,
                           const mla_tensor* indices, const mla_tensor* topk_length,
                           float softmax_scale, const mla_tensor* out, const mla_tensor* lse,
                           SparsePrefillArgs* a) {
  MLA_TRY(to_views({MLA_VIEW(*a, q), MLA_VIEW(*a, kv), MLA_VIEW(*a, indices),
                    MLA_VIEW(*a, topk_length), MLA_VIEW(*a, out), MLA_VIEW(*a, lse)}));
  MLA_TRY(to_kv_format(kv_format, "kv", &a->kv_format));
  a->softmax_scale = softmax_scale;
  return Status::Ok();
}

}  // namespace

extern "C" {

int32_t mla_sparse_decode_workspace_size(const mla_tensor* q, const mla_tensor* kv,
                                         int32_t kv_format, const mla_tensor* indices,
                                         const mla_tensor* topk_length, float softmax_scale,
                                         const mla_tensor* out, const mla_tensor* lse,
                                         size_t* bytes) {
  return guarded([&] {
    SparseDecodeArgs a;
    MLA_TRY(
        sparse_decode_args(q, kv, kv_format, indices, topk_length, softmax_scale, out, lse, &a));
    return sparse_workspace_size(a, bytes);
  });
}

int32_t mla_sparse_decode_ws(const mla_tensor* q, const mla_tensor* kv, int32_t kv_format,
                             const mla_tensor* indices, const mla_tensor* topk_length,
                             float softmax_scale, const mla_tensor* out, const mla_tensor* lse,
                             void* workspace, size_t workspace_bytes, void* stream) {
  return guarded([&] {
    SparseDecodeArgs a;
    MLA_TRY(
        sparse_decode_args(q, kv, kv_format, indices, topk_length, softmax_scale, out, lse, &a));
    return sparse_decode(a, Workspace{workspace, workspace_bytes}, to_context(stream));
  });
}

int32_t mla_sparse_decode_plan(const mla_tensor* q, const mla_tensor* kv, int32_t kv_format,
                               const mla_tensor* indices, const mla_tensor* topk_length,
                               float softmax_scale, const mla_tensor* out, const mla_tensor* lse,
                               void* workspace, size_t workspace_bytes, void* stream,
                               mla_decode_plan_info* plan) {
  return guarded([&] {
    MLA_TRY(expect_pointer(plan, "plan"));
    SparseDecodeArgs a;
    MLA_TRY(
        sparse_decode_args(q, kv, kv_format, indices, topk_length, softmax_scale, out, lse, &a));
    DecodePlan p;
    MLA_TRY(sparse_decode_plan(a, Workspace{workspace, workspace_bytes}, &p, to_context(stream)));
    *plan = to_plan_info(p);
    return Status::Ok();
  });
}

int32_t mla_sparse_decode_planned(const mla_tensor* q, const mla_tensor* kv, int32_t kv_format,
                                  const mla_tensor* indices, const mla_tensor* topk_length,
                                  float softmax_scale, const mla_tensor* out, const mla_tensor* lse,
                                  const mla_decode_plan_info* plan, void* workspace,
                                  size_t workspace_bytes, void* stream) {
  return guarded([&] {
    MLA_TRY(expect_pointer(plan, "plan"));
    SparseDecodeArgs a;
    MLA_TRY(
        sparse_decode_args(q, kv, kv_format, indices, topk_length, softmax_scale, out, lse, &a));
    const DecodePlan p = from_plan_info(*plan);
    a.plan = &p;
    return sparse_decode(a, Workspace{workspace, workspace_bytes}, to_context(stream));
  });
}

int32_t mla_sparse_decode(const mla_tensor* q, const mla_tensor* kv, int32_t kv_format,
                          const mla_tensor* indices, const mla_tensor* topk_length,
                          float softmax_scale, const mla_tensor* out, const mla_tensor* lse,
                          void* stream) {
  return mla_sparse_decode_ws(q, kv, kv_format, indices, topk_length, softmax_scale, out, lse,
                              nullptr, 0, stream);
}

int32_t mla_sparse_prefill_workspace_size(const mla_tensor* q, const mla_tensor* kv,
                                          int32_t kv_format, const mla_tensor* indices,
                                          const mla_tensor* topk_length, float softmax_scale,
                                          const mla_tensor* out, const mla_tensor* lse,
                                          size_t* bytes) {
  return guarded([&] {
    SparsePrefillArgs a;
    MLA_TRY(
        sparse_prefill_args(q, kv, kv_format, indices, topk_length, softmax_scale, out, lse, &a));
    return sparse_workspace_size(a, bytes);
  });
}

int32_t mla_sparse_prefill_ws(const mla_tensor* q, const mla_tensor* kv, int32_t kv_format,
                              const mla_tensor* indices, const mla_tensor* topk_length,
                              float softmax_scale, const mla_tensor* out, const mla_tensor* lse,
                              void* workspace, size_t workspace_bytes, void* stream) {
  return guarded([&] {
    SparsePrefillArgs a;
    MLA_TRY(
        sparse_prefill_args(q, kv, kv_format, indices, topk_length, softmax_scale, out, lse, &a));
    return sparse_prefill(a, Workspace{workspace, workspace_bytes}, to_context(stream));
  });
}

int32_t mla_sparse_prefill(const mla_tensor* q, const mla_tensor* kv, int32_t kv_format,
                           const mla_tensor* indices, const mla_tensor* topk_length,
                           float softmax_scale, const mla_tensor* out, const mla_tensor* lse,
                           void* stream) {
  return mla_sparse_prefill_ws(q, kv, kv_format, indices, topk_length, softmax_scale, out, lse,
                               nullptr, 0, stream);
}

}  // extern "C"
