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
    MLA_TRY(to_views({MLA_VIEW(a, c_kv), MLA_VIEW(a, w_uk), MLA_VIEW(a, w_uv), MLA_VIEW(a, k_nope),
                      MLA_VIEW(a, v)}));
    return decompress_kv(a, to_context(stream));
  });
}

int32_t mla_mha_prefill(const mla_tensor* q, const mla_tensor* k, const mla_tensor* v,
                        const mla_tensor* cu_seqlens_q, const mla_tensor* cu_seqlens_k,
                        float softmax_scale, int32_t causal, const mla_tensor* out,
                        const mla_tensor* lse, void* stream) {
  return guarded([&] {
    MhaPrefillArgs a;
    MLA_TRY(to_views({MLA_VIEW(a, q), MLA_VIEW(a, k), MLA_VIEW(a, v), MLA_VIEW(a, cu_seqlens_q),
                      MLA_VIEW(a, cu_seqlens_k), MLA_VIEW(a, out), MLA_VIEW(a, lse)}));
    a.softmax_scale = softmax_scale;
    a.causal = causal != 0;
    return mha_prefill(a, to_context(stream));
  });
}

}  // extern "C"
