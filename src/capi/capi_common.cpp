#include "capi/capi_common.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "common/validate.hpp"

namespace mla::capi {
namespace {
thread_local std::string g_last_error;
}

int32_t set_status(const Status& st) {
  if (st.ok()) {
    g_last_error.clear();
    return MLA_OK;
  }
  g_last_error = st.message();
  return int32_t(st.code());
}

const std::string& last_error() {
  return g_last_error;
}

Status to_view(const mla_tensor* t, const char* name, TensorView* out) {
  *out = TensorView{};
  if (t == nullptr) return Status::Ok();
  if (t->ndim < 0 || t->ndim > MLA_MAX_DIMS)
    return Status(Errc::invalid_shape,
                  fmt::format("{}: ndim = {} is outside [0, {}]", name, t->ndim, MLA_MAX_DIMS));
  if (t->dtype < MLA_DTYPE_F32 || t->dtype > MLA_DTYPE_I64)
    return Status(Errc::invalid_dtype,
                  fmt::format("{}: dtype code {} is not an MLA_DTYPE_* value", name, t->dtype));
  if (t->device_type != MLA_DEVICE_CPU && t->device_type != MLA_DEVICE_CUDA)
    return Status(
        Errc::invalid_device,
        fmt::format("{}: device type {} is neither CPU (1) nor CUDA (2)", name, t->device_type));
  for (int d = 0; d < t->ndim; ++d) {
    if (t->shape[d] < 0)
      return Status(Errc::invalid_shape,
                    fmt::format("{}: shape[{}] = {} is negative", name, d, t->shape[d]));
  }
  out->data = t->data;
  out->dtype = DType(t->dtype);
  out->device = Device{DeviceType(t->device_type), t->device_id};
  out->ndim = t->ndim;
  for (int d = 0; d < t->ndim; ++d) {
    out->shape[d] = t->shape[d];
    out->strides[d] = t->strides[d];
  }
  // Sizes arrive as raw int64: an element count or extent past int64 would
  // wrap in every later computation, so it stops here, naming the argument.
  return detail::expect_extent(*out, name);
}

Status to_views(std::initializer_list<ViewArg> args) {
  for (const ViewArg& a : args) MLA_TRY(to_view(a.t, a.name, a.out));
  return Status::Ok();
}

Status to_kv_format(int32_t code, const char* name, KvFormat* out) {
  if (code != MLA_KV_BF16 && code != MLA_KV_FP8_DS_MLA && code != MLA_KV_FP8_E4M3)
    return Status(
        Errc::invalid_value,
        fmt::format("{}: kv format {} is none of bf16 ({}), fp8_ds_mla ({}), "
                    "fp8_e4m3 ({})",
                    name, code, int(MLA_KV_BF16), int(MLA_KV_FP8_DS_MLA), int(MLA_KV_FP8_E4M3)));
  *out = KvFormat(code);
  return Status::Ok();
}

TensorView& kv_scale() {
  thread_local TensorView scale;
  return scale;
}

Status to_cache(const mla_tensor* t, int32_t format, const char* name, KvCacheView* out) {
  MLA_TRY(to_view(t, name, &out->data));
  MLA_TRY(to_kv_format(format, name, &out->format));
  if (out->format == KvFormat::fp8_e4m3) out->scale = kv_scale();
  return Status::Ok();
}

Status expect_pointer(const void* p, const char* name) {
  if (p == nullptr) return Status(Errc::invalid_value, fmt::format("{} is NULL", name));
  return Status::Ok();
}

Status write_text(const std::string& text, char* buf, size_t buf_size, size_t* length) {
  MLA_TRY(expect_pointer(length, "length"));
  if (buf == nullptr && buf_size > 0)
    return Status(Errc::invalid_value, fmt::format("buf is NULL but buf_size = {}", buf_size));
  *length = text.size();
  if (buf_size > 0) {
    const size_t n = std::min(text.size(), buf_size - 1);
    std::memcpy(buf, text.data(), n);
    buf[n] = '\0';
  }
  return Status::Ok();
}

}  // namespace mla::capi
