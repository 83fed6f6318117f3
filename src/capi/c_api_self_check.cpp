// mla_self_check: the self check (mla/self_check.hpp) across the C ABI, its result as JSON.
#include <nlohmann/json.hpp>
#include <string>

#include "capi/capi_common.hpp"
#include "mla/c_api.h"
#include "mla/self_check.hpp"

namespace mla::capi {
namespace {

nlohmann::json to_json(const SelfCheckResult& r) {
  nlohmann::json checks = nlohmann::json::array();
  for (const SelfCheckItem& c : r.checks)
    checks.push_back({{"name", c.name},
                      {"shape", c.shape},
                      {"ok", c.ok},
                      {"detail", c.detail},
                      {"line", c.line()}});
  return {{"status", r.status},
          {"header", r.header},
          {"checks", std::move(checks)},
          {"summary", r.summary},
          {"text", r.text()}};
}

}  // namespace
}  // namespace mla::capi

extern "C" {

int32_t mla_self_check(uint64_t seed, int32_t* result, char* buf, size_t buf_size, size_t* length) {
  return mla::capi::guarded([&]() -> mla::Status {
    // The arguments are checked before the run: a bad one costs no GPU time.
    MLA_TRY(mla::capi::expect_pointer(result, "result"));
    MLA_TRY(mla::capi::write_text("", buf, buf_size, length));
    const mla::SelfCheckResult r = mla::self_check(seed);
    *result = r.status;
    return mla::capi::write_text(mla::capi::to_json(r).dump(2), buf, buf_size, length);
  });
}

}  // extern "C"
