#include "reference/kv_cache_ref.hpp"

#include <cstring>

#include "mla/numeric.hpp"
#include "reference/fp8_quant.hpp"
#include "reference/tensor_read.hpp"

namespace mla::reference {

uint8_t* kv_entry_ptr_mut(const KvCacheView& cache, int64_t slot) {
  const TensorView& d = cache.data;
  const int64_t page = slot / cache.page_size(), offset = slot % cache.page_size();
  const int64_t elem = dtype_size(d.dtype);
  return static_cast<uint8_t*>(d.data) + (page * d.strides[0] + offset * d.strides[1]) * elem;
}
const uint8_t* kv_entry_ptr(const KvCacheView& cache, int64_t slot) {
  return kv_entry_ptr_mut(cache, slot);
}

float fp8_e4m3_scale(const KvCacheView& cache) {
  return *static_cast<const float*>(cache.scale.data);
}

void load_kv_entry(const KvCacheView& cache, int64_t slot, double* out576) {
  const uint8_t* e = kv_entry_ptr(cache, slot);
  if (cache.format == KvFormat::fp8_ds_mla) {
    dequantize_fp8_ds_mla_entry(e, out576);
    return;
  }
  if (cache.format == KvFormat::fp8_e4m3) {
    dequantize_fp8_e4m3_entry(e, fp8_e4m3_scale(cache), out576);
    return;
  }
  for (int i = 0; i < kDqk; ++i) {
    bf16 h;
    std::memcpy(&h.bits, e + 2 * i, 2);
    out576[i] = bf16_to_float(h);
  }
}

void load_kv_entry(const KvCacheView& cache, int64_t slot, float* out576) {
  double tmp[kDqk];
  load_kv_entry(cache, slot, tmp);
  // e4m3 (4 significant bits) times a power-of-two scale >= 2^-14 fits a float
  // exactly; so does bf16. The narrowing loses nothing. fp8_e4m3's scale is
  // any float: code * s has 4 + 24 significant bits, so the float is code * s
  // rounded once (what a kernel that dequantises in f32 gets too).
  for (int i = 0; i < kDqk; ++i) out576[i] = static_cast<float>(tmp[i]);
}

void store_kv_entry(const KvCacheView& cache, int64_t slot, const float* c_kv512,
                    const float* k_rope64) {
  uint8_t* e = kv_entry_ptr_mut(cache, slot);
  if (cache.format == KvFormat::fp8_ds_mla) {
    quantize_fp8_ds_mla_entry(c_kv512, k_rope64, e);
    return;
  }
  if (cache.format == KvFormat::fp8_e4m3) {
    quantize_fp8_e4m3_entry(c_kv512, k_rope64, fp8_e4m3_scale(cache), e);
    return;
  }
  for (int i = 0; i < kDqk; ++i) {
    const bf16 h = float_to_bf16(i < kDc ? c_kv512[i] : k_rope64[i - kDc]);
    std::memcpy(e + 2 * i, &h.bits, 2);
  }
}

Status append_kv(const AppendKvArgs& a) {
  const int64_t T = a.slots.shape[0];
  float c[kDc], r[kDr];
  for (int64_t t = 0; t < T; ++t) {
    const int64_t slot = read_int(a.slots, {t});
    if (slot < 0) continue;  // -1: padding token, nothing to write
    read_row_f32(a.c_kv, t, c, kDc);
    read_row_f32(a.k_rope, t, r, kDr);
    store_kv_entry(a.cache, slot, c, r);
  }
  return Status::Ok();
}

Status read_kv(const ReadKvArgs& a) {
  const int64_t T = a.slots.shape[0];
  double v[kDqk];
  for (int64_t t = 0; t < T; ++t) {
    load_kv_entry(a.cache, read_int(a.slots, {t}), v);
    write_row(a.c_kv, t, v, kDc);
    write_row(a.k_rope, t, v + kDc, kDr);
  }
  return Status::Ok();
}

}  // namespace mla::reference
