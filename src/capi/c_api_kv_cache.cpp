// C ABI of the paged latent cache (mla/kv_cache.hpp).
#include "capi/capi_common.hpp"
#include "mla/kv_cache.hpp"

using namespace mla;
using namespace mla::capi;

extern "C" {

int32_t mla_validate_kv_cache(const mla_tensor* cache, int32_t kv_format) {
  return guarded([&] {
    KvCacheView c;
    MLA_TRY(to_cache(cache, kv_format, "cache", &c));
    return validate_kv_cache(c, "cache");
  });
}

int32_t mla_append_kv(const mla_tensor* c_kv, const mla_tensor* k_rope, const mla_tensor* slots,
                      const mla_tensor* cache, int32_t kv_format, void* stream) {
  return guarded([&] {
    AppendKvArgs a;
    MLA_TRY(to_views({MLA_VIEW(a, c_kv), MLA_VIEW(a, k_rope), MLA_VIEW(a, slots)}));
    MLA_TRY(to_cache(cache, kv_format, "cache", &a.cache));
    return append_kv(a, to_context(stream));
  });
}

int32_t mla_read_kv(const mla_tensor* cache, int32_t kv_format, const mla_tensor* slots,
                    const mla_tensor* c_kv, const mla_tensor* k_rope, void* stream) {
  return guarded([&] {
    ReadKvArgs a;
    MLA_TRY(to_cache(cache, kv_format, "cache", &a.cache));
    MLA_TRY(to_views({MLA_VIEW(a, slots), MLA_VIEW(a, c_kv), MLA_VIEW(a, k_rope)}));
    return read_kv(a, to_context(stream));
  });
}

}  // extern "C"
