#include "mla/tensor.hpp"

#include "mla/kv_cache.hpp"

namespace mla {

const char* dtype_name(DType t) noexcept {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::e4m3: return "e4m3";
    case DType::u8: return "u8";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
  }
  return "?";
}

const char* kv_format_name(KvFormat f) noexcept {
  return f == KvFormat::bf16 ? "bf16" : f == KvFormat::fp8_ds_mla ? "fp8_ds_mla" : "fp8_e4m3";
}

TensorView TensorView::make(void* data, DType dtype, std::initializer_list<int64_t> shape,
                            Device device) {
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.ndim = static_cast<int32_t>(shape.size());
  int d = 0;
  for (int64_t s : shape) t.shape[d++] = s;
  int64_t stride = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    t.strides[i] = stride;
    stride *= t.shape[i];
  }
  return t;
}

int64_t TensorView::numel() const noexcept {
  if (ndim < 0) return 0;
  int64_t n = 1;
  bool overflow = false;
  for (int i = 0; i < ndim; ++i) {
    if (shape[i] <= 0) return 0;  // empty (a negative dim is rejected by the checks)
    overflow |= __builtin_mul_overflow(n, shape[i], &n);
  }
  return overflow ? INT64_MAX : n;  // saturates: checked views never get here
}

bool TensorView::is_contiguous() const noexcept {
  int64_t stride = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != stride) return false;
    stride *= shape[i];
  }
  return true;
}

}  // namespace mla
