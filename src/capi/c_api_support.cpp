// C ABI of the capability probe (mla/support.hpp).
#include <fmt/format.h>

#include "capi/capi_common.hpp"
#include "mla/support.hpp"

using namespace mla;
using namespace mla::capi;

static_assert(MLA_FAMILY_DECODE == int(OpFamily::decode) &&
                  MLA_FAMILY_SPARSE_DECODE == int(OpFamily::sparse_decode) &&
                  MLA_FAMILY_SPARSE_PREFILL == int(OpFamily::sparse_prefill) &&
                  MLA_FAMILY_INDEXER == int(OpFamily::indexer) &&
                  MLA_FAMILY_TOPK == int(OpFamily::topk) &&
                  MLA_FAMILY_PREFILL == int(OpFamily::prefill) &&
                  MLA_FAMILY_KV_CACHE == int(OpFamily::kv_cache) &&
                  MLA_NUM_FAMILIES == kNumOpFamilies,
              "MLA_FAMILY_* must equal mla::OpFamily values");

extern "C" {

int32_t mla_is_supported(int32_t family, int32_t device_id, int32_t* supported, char* reason,
                         size_t reason_size, size_t* reason_length) {
  return guarded([&] {
    MLA_TRY(expect_pointer(supported, "supported"));
    if (family < 0 || family >= MLA_NUM_FAMILIES)
      return Status(Errc::invalid_value,
                    fmt::format("family = {} is not an MLA_FAMILY_* value (0..{})", family,
                                MLA_NUM_FAMILIES - 1));
    const Support s = is_supported(OpFamily(family), device_id);
    *supported = s.supported ? 1 : 0;
    return write_text(s.reason, reason, reason_size, reason_length);
  });
}

const char* mla_family_name(int32_t family) {
  if (family < 0 || family >= MLA_NUM_FAMILIES) return nullptr;
  return op_family_name(OpFamily(family));
}

}  // extern "C"
