// C ABI of the non-absorbed prefill (mla/prefill.hpp).
#include "capi/capi_common.hpp"
#include "mla/prefill.hpp"

using namespace mla;
using namespace mla::capi;

extern "C" {

int32_t mla_decompress_kv(const mla_tensor* c_kv, const mla_tensor* w_uk, const mla_tensor* w_uv,
                          const mla_tensor* k_nope, const mla_tensor* v, void* stream) {
  return guarded([&] {
    DecompressKvArgs a;
    MLA_TRY(to_view(c_kv, "c_kv", &a.c_kv));
    MLA_TRY(to_view(w_uk, "w_uk", &a.w_uk));
    MLA_TRY(to_view(w_uv, "w_uv", &a.w_uv));
    MLA_TRY(to_view(k_nope, "k_nope", &a.k_nope));
    MLA_TRY(to_view(v, "v", &a.v));
    return decompress_kv(a, to_context(stream));
  });
}

int32_t mla_mha_prefill(const mla_tensor* q, const mla_tensor* k, const mla_tensor* v,
                        const mla_tensor* cu_seqlens_q, const mla_tensor* cu_seqlens_k,
                        float softmax_scale, int32_t causal, const mla_tensor* out,
                        const mla_tensor* lse, void* stream) {
  return guarded([&] {
    MhaPrefillArgs a;
    MLA_TRY(to_view(q, "q", &a.q));
    MLA_TRY(to_view(k, "k", &a.k));
    MLA_TRY(to_view(v, "v", &a.v));
    MLA_TRY(to_view(cu_seqlens_q, "cu_seqlens_q", &a.cu_seqlens_q));
    MLA_TRY(to_view(cu_seqlens_k, "cu_seqlens_k", &a.cu_seqlens_k));
    MLA_TRY(to_view(out, "out", &a.out));
    MLA_TRY(to_view(lse, "lse", &a.lse));
    a.softmax_scale = softmax_scale;
    a.causal = causal != 0;
    return mha_prefill(a, to_context(stream));
  });
}

}  // extern "C"
