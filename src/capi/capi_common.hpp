// Shared pieces of the C ABI (include/mla/c_api.h): turning mla_tensor into
// mla::TensorView with the C-level fields checked, the per-thread error
// message, and the guard that keeps every C++ exception inside the library.
#pragma once
#include <initializer_list>
#include <string>
#include <utility>

#include "mla/c_api.h"
#include "mla/decode.hpp"
#include "mla/kv_cache.hpp"
#include "mla/status.hpp"
#include "mla/tensor.hpp"

namespace mla::capi {

// The C codes are the Errc values: the ABI promises it, the compiler checks it.
static_assert(MLA_ERR_INVALID_SHAPE == int(Errc::invalid_shape) &&
                  MLA_ERR_INVALID_DTYPE == int(Errc::invalid_dtype) &&
                  MLA_ERR_INVALID_STRIDE == int(Errc::invalid_stride) &&
                  MLA_ERR_INVALID_DEVICE == int(Errc::invalid_device) &&
                  MLA_ERR_OUT_OF_RANGE == int(Errc::out_of_range) &&
                  MLA_ERR_MISALIGNED == int(Errc::misaligned) &&
                  MLA_ERR_INVALID_VALUE == int(Errc::invalid_value) &&
                  MLA_ERR_UNSUPPORTED == int(Errc::unsupported) &&
                  MLA_ERR_INSUFFICIENT_WORKSPACE == int(Errc::insufficient_workspace) &&
                  MLA_ERR_CUDA == int(Errc::cuda_error),
              "MLA_ERR_* must equal mla::Errc values");
static_assert(MLA_DTYPE_F32 == int(DType::f32) && MLA_DTYPE_F64 == int(DType::f64) &&
                  MLA_DTYPE_BF16 == int(DType::bf16) && MLA_DTYPE_F16 == int(DType::f16) &&
                  MLA_DTYPE_E4M3 == int(DType::e4m3) && MLA_DTYPE_U8 == int(DType::u8) &&
                  MLA_DTYPE_I32 == int(DType::i32) && MLA_DTYPE_I64 == int(DType::i64),
              "MLA_DTYPE_* must equal mla::DType values");
static_assert(MLA_DEVICE_CPU == int(DeviceType::cpu) && MLA_DEVICE_CUDA == int(DeviceType::cuda),
              "MLA_DEVICE_* must equal mla::DeviceType values");
static_assert(MLA_KV_BF16 == int(KvFormat::bf16) &&
                  MLA_KV_FP8_DS_MLA == int(KvFormat::fp8_ds_mla) &&
                  MLA_KV_FP8_E4M3 == int(KvFormat::fp8_e4m3),
              "MLA_KV_* must equal mla::KvFormat values");
static_assert(MLA_MAX_DIMS == kMaxDims, "mla_tensor and TensorView hold the same rank");

// Records `st` as this thread's last error (or clears it) and returns its code.
int32_t set_status(const Status& st);

// mla_tensor -> TensorView. `t == nullptr` gives an undefined view (an optional
// argument left out); required arguments are then rejected by the C++ checks,
// which name them. The C fields the C++ types cannot represent (unknown dtype
// or device codes, ranks past MLA_MAX_DIMS, negative sizes) are caught here.
Status to_view(const mla_tensor* t, const char* name, TensorView* out);
Status to_kv_format(int32_t code, const char* name, KvFormat* out);
// The cache view; an fp8_e4m3 cache takes this thread's mla_set_kv_scale view.
Status to_cache(const mla_tensor* t, int32_t format, const char* name, KvCacheView* out);
// This thread's mla_set_kv_scale view (undefined when none is set).
TensorView& kv_scale();

// One tensor argument of a C function and the view it becomes.
struct ViewArg {
  const mla_tensor* t;
  const char* name;
  TensorView* out;
};
// to_view for each argument in order; the first error is returned.
Status to_views(std::initializer_list<ViewArg> args);

// The C parameter `param` as the view args.param, named "param" in errors: a C function's
// tensor parameters carry the names of the C++ fields they fill.
// clang-format off
#define MLA_VIEW(args, param) ::mla::capi::ViewArg{(param), #param, &(args).param}
// clang-format on

// A required pointer argument of the C functions that take no tensors (out
// parameters, names): NULL is an invalid_value naming it.
Status expect_pointer(const void* p, const char* name);

// Copies `text` into a caller's buffer snprintf-style (at most buf_size - 1
// characters and a NUL; buf may be NULL when buf_size is 0) and stores the
// full length in *length, so a caller with too small a buffer can retry.
Status write_text(const std::string& text, char* buf, size_t buf_size, size_t* length);

// This thread's checked mode (mla_set_check_device_values).
bool check_device_values();

// mla_decode_plan_info <-> mla::DecodePlan (mla/decode.hpp), field by field.
inline DecodePlan from_plan_info(const mla_decode_plan_info& c) {
  DecodePlan p;
  p.data = c.data;
  p.bytes = c.bytes;
  p.device = c.device;
  p.num_workers = c.num_workers;
  p.batch = c.batch;
  p.s_q = c.s_q;
  p.h_q = c.h_q;
  p.batch_invariant = c.batch_invariant != 0;
  p.sparse = c.sparse != 0;
  p.topk = c.topk;
  p.capacity = c.capacity;
  return p;
}
inline mla_decode_plan_info to_plan_info(const DecodePlan& p) {
  return mla_decode_plan_info{p.data,           p.bytes, p.device,  p.num_workers,
                              p.batch,          p.s_q,   p.h_q,     p.batch_invariant ? 1 : 0,
                              p.sparse ? 1 : 0, p.topk,  p.capacity};
}

inline ExecContext to_context(void* stream) {
  return ExecContext{stream, check_device_values()};
}

// Runs `body` (a callable returning Status), converting any exception that
// escapes it into MLA_ERR_INTERNAL with its what().
template <class F>
int32_t guarded(F&& body) noexcept {
  try {
    return set_status(std::forward<F>(body)());
  } catch (const std::exception& e) {
    return set_status(Status(Errc(MLA_ERR_INTERNAL), std::string("internal error: ") + e.what()));
  } catch (...) {
    return set_status(Status(Errc(MLA_ERR_INTERNAL), "internal error: unknown C++ exception"));
  }
}

}  // namespace mla::capi
