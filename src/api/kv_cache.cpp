// Public entry points of the paged latent cache: validate, then dispatch.
#include "mla/kv_cache.hpp"

#include "api/backend.hpp"
#include "api/device_values.hpp"
#include "api/paged_checks.hpp"
#include "common/validate.hpp"
#include "reference/kv_cache_ref.hpp"
#include "reference/tensor_read.hpp"

#ifdef MLA_HAS_CUDA
#include "cuda/kv_cache/kv_cache_cuda.hpp"
#endif

namespace mla {

using detail::error;
using detail::kAny;

Status validate_kv_cache(const KvCacheView& cache, const char* name) {
  const TensorView& d = cache.data;
  if (cache.format != KvFormat::bf16 && cache.format != KvFormat::fp8_ds_mla &&
      cache.format != KvFormat::fp8_e4m3)
    return error(Errc::invalid_value, "{}: unknown cache format {}", name,
                 static_cast<int>(cache.format));
  const bool fp8 = kv_format_is_fp8(cache.format);
  const int64_t entry = kv_entry_bytes(cache.format) / (fp8 ? 1 : 2);  // in elements
  const std::string what = fmt::format("{}.data ({} cache)", name, kv_format_name(cache.format));
  MLA_TRY(detail::expect_known_device(d, what.c_str()));
  const std::string symbolic = fmt::format("[num_pages, page_size, 1, {}]", entry);
  MLA_TRY(detail::expect_shape(d, what.c_str(), {kAny, kAny, 1, entry}, symbolic.c_str()));
  // fp8 entries are raw bytes: engines hand them over as uint8 or float8_e4m3fn.
  if (fp8)
    MLA_TRY(detail::expect_dtype(d, what.c_str(), {DType::u8, DType::e4m3}));
  else
    MLA_TRY(detail::expect_dtype(d, what.c_str(), {DType::bf16}));
  if (d.shape[1] < 1)
    return error(Errc::invalid_shape, "{}: page_size = {} must be at least 1", what, d.shape[1]);
  // Token, head and value dims dense; only the page stride may be padded.
  MLA_TRY(detail::expect_inner_contiguous(d, what.c_str(), 3));
  if (d.shape[0] > 1 && d.strides[0] < d.shape[1] * entry)
    return error(Errc::invalid_stride,
                 "{}: page stride {} is smaller than page_size * entry = {} (pages overlap)", what,
                 d.strides[0], d.shape[1] * entry);
  const std::string sname = fmt::format("{}.scale", name);
  if (cache.format != KvFormat::fp8_e4m3) {
    if (cache.scale.defined())
      return error(Errc::invalid_value, "{}: a {} cache has no per-tensor scale (leave it empty)",
                   sname, kv_format_name(cache.format));
    return Status::Ok();
  }
  const TensorView& s = cache.scale;
  if (!s.defined() || s.data == nullptr)
    return error(Errc::invalid_value,
                 "{}: the fp8_e4m3 cache needs its per-tensor scale (one f32, k = code * scale)",
                 sname);
  MLA_TRY(detail::expect_dtype(s, sname.c_str(), {DType::f32}));
  if (s.numel() != 1)
    return error(Errc::invalid_shape, "{}: {} elements, expected exactly one", sname, s.numel());
  MLA_TRY(detail::expect_same_device(d, name, s, sname.c_str()));
  if (!detail::on_cuda(d.device)) {  // CUDA: the value is the caller's contract (kv_cache.hpp)
    const float v = *static_cast<const float*>(s.data);
    if (!(v > 0.f && v <= 3.4028235e38f))
      return error(Errc::invalid_value, "{} = {} must be finite and > 0", sname, v);
  }
  return Status::Ok();
}

namespace {

Status validate_token_rows(const TensorView& t, const char* name, int64_t T, int64_t width,
                           const char* symbolic, std::initializer_list<DType> dtypes) {
  MLA_TRY(detail::expect_shape(t, name, {T, width}, symbolic));
  MLA_TRY(detail::expect_dtype(t, name, dtypes));
  return detail::expect_inner_contiguous(t, name, 0);  // any non-negative strides
}

}  // namespace

Status append_kv(const AppendKvArgs& a, const ExecContext& ctx) {
  MLA_TRY(validate_kv_cache(a.cache, "cache"));
  MLA_TRY(detail::expect_shape(a.slots, "slots", {kAny}, "[T]"));
  MLA_TRY(detail::expect_dtype(a.slots, "slots", {DType::i64}));
  const int64_t T = a.slots.shape[0];
  MLA_TRY(validate_token_rows(a.c_kv, "c_kv", T, kDc, "[T, 512]", {DType::f32, DType::bf16}));
  MLA_TRY(validate_token_rows(a.k_rope, "k_rope", T, kDr, "[T, 64]", {DType::f32, DType::bf16}));
  const TensorView& dev = a.cache.data;
  MLA_TRY(detail::expect_same_device(dev, "cache", a.slots, "slots"));
  MLA_TRY(detail::expect_same_device(dev, "cache", a.c_kv, "c_kv"));
  MLA_TRY(detail::expect_same_device(dev, "cache", a.k_rope, "k_rope"));
  MLA_TRY(detail::expect_disjoint({{&a.cache.data, "cache"}},
                                  {{&a.slots, "slots"}, {&a.c_kv, "c_kv"}, {&a.k_rope, "k_rope"}}));
  // Empty outputs: a no-op on every device (nothing to write, no launch).
  if (T == 0) return Status::Ok();  // no tokens
  if (detail::on_cuda(dev.device)) {
    if (ctx.check_device_values) {  // names a slot outside the pool the kernel would skip
      detail::HostCopy sl;
      MLA_TRY(sl.copy(a.slots, "slots", ctx));
      MLA_TRY(detail::check_slot_values(sl.view(), "slots", a.cache.num_pages(),
                                        a.cache.page_size(), /*allow_skip=*/true));
    }
    // Slots live on the GPU: the kernel skips -1 and any slot outside the pool.
    return MLA_CUDA_BACKEND(cuda::append_kv(a, ctx), "append_kv");
  }
  MLA_TRY(detail::check_slot_values(a.slots, "slots", a.cache.num_pages(), a.cache.page_size(),
                                    /*allow_skip=*/true));
  return reference::append_kv(a);
}

Status read_kv(const ReadKvArgs& a, const ExecContext& ctx) {
  MLA_TRY(validate_kv_cache(a.cache, "cache"));
  MLA_TRY(detail::expect_shape(a.slots, "slots", {kAny}, "[T]"));
  MLA_TRY(detail::expect_dtype(a.slots, "slots", {DType::i64}));
  const int64_t T = a.slots.shape[0];
  MLA_TRY(validate_token_rows(a.c_kv, "c_kv", T, kDc, "[T, 512]", {DType::f32}));
  MLA_TRY(validate_token_rows(a.k_rope, "k_rope", T, kDr, "[T, 64]", {DType::f32}));
  const TensorView& dev = a.cache.data;
  MLA_TRY(detail::expect_same_device(dev, "cache", a.slots, "slots"));
  MLA_TRY(detail::expect_same_device(dev, "cache", a.c_kv, "c_kv"));
  MLA_TRY(detail::expect_same_device(dev, "cache", a.k_rope, "k_rope"));
  MLA_TRY(detail::expect_disjoint({{&a.c_kv, "c_kv"}, {&a.k_rope, "k_rope"}},
                                  {{&a.cache.data, "cache"}, {&a.slots, "slots"}}));
  if (detail::on_cuda(dev.device)) return detail::no_cuda_backend("read_kv");
  MLA_TRY(detail::check_slot_values(a.slots, "slots", a.cache.num_pages(), a.cache.page_size(),
                                    /*allow_skip=*/false));
  if (T == 0) return Status::Ok();  // no tokens: nothing to write
  return reference::read_kv(a);
}

}  // namespace mla
