// Library-level C functions: versions, build features, the error channel.
#include <string>

#include "capi/capi_common.hpp"
#include "mla/c_api.h"

namespace mla::capi {
const std::string& last_error();

namespace {
thread_local bool g_check_device_values = false;
}
bool check_device_values() {
  return g_check_device_values;
}
}  // namespace mla::capi

extern "C" {

int32_t mla_abi_version(void) {
  return MLA_C_ABI_VERSION;
}

const char* mla_version(void) {
#ifdef MLA_VERSION_STRING
  return MLA_VERSION_STRING;
#else
  return "0.1.0";
#endif
}

int32_t mla_built_with_cuda(void) {
#ifdef MLA_HAS_CUDA
  return 1;
#else
  return 0;
#endif
}

void mla_set_check_device_values(int32_t on) {
  mla::capi::g_check_device_values = on != 0;
}

int32_t mla_check_device_values(void) {
  return mla::capi::g_check_device_values ? 1 : 0;
}

const char* mla_last_error_message(void) {
  return mla::capi::last_error().c_str();
}

const char* mla_status_name(int32_t status) {
  if (status == MLA_ERR_INTERNAL) return "internal";
  if (status < MLA_OK || status > MLA_ERR_CUDA) return "unknown";
  return mla::errc_name(mla::Errc(status));
}

int32_t mla_kv_entry_bytes(int32_t kv_format) {
  if (kv_format != MLA_KV_BF16 && kv_format != MLA_KV_FP8_DS_MLA && kv_format != MLA_KV_FP8_E4M3)
    return -1;
  return mla::kv_entry_bytes(mla::KvFormat(kv_format));
}

int32_t mla_set_kv_scale(const mla_tensor* scale) {
  return mla::capi::guarded([&] {
    mla::TensorView v;
    MLA_TRY(mla::capi::to_view(scale, "scale", &v));
    mla::capi::kv_scale() = v;
    return mla::Status::Ok();
  });
}

}  // extern "C"
