// One element of any storage dtype, read as double or written from a double
// (rounded to the dtype: f32 by a cast, bf16 by round-to-nearest-even of the
// float, e4m3 by the saturating RNE conversion, integers by truncation). Used
// by the CPU reference's strided tensor access and the tests' host tensors,
// so both decode the bytes the same way. Slow and simple on purpose.
#pragma once
#include <cstdint>
#include <cstring>
#include <limits>

#include "mla/numeric.hpp"
#include "mla/tensor.hpp"

namespace mla::detail {

// The bytes of a T at p, and a T's bytes written to p (any alignment).
template <class T>
T load_bytes(const void* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T>
void store_bytes(void* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

// f16 has no conversion here (no op accepts it): it reads as NaN.
inline double load_element(DType dt, const void* src) {
  const auto* p = static_cast<const uint8_t*>(src);
  switch (dt) {
    case DType::f32: return load_bytes<float>(p);
    case DType::f64: return load_bytes<double>(p);
    case DType::bf16: return bf16_to_float(bf16{load_bytes<uint16_t>(p)});
    case DType::e4m3: return e4m3_to_float(*p);
    case DType::u8: return *p;
    case DType::i32: return load_bytes<int32_t>(p);
    case DType::i64: return static_cast<double>(load_bytes<int64_t>(p));
    case DType::f16: break;
  }
  return std::numeric_limits<double>::quiet_NaN();
}

// f16: nothing is written (no op accepts it).
inline void store_element(DType dt, void* dst, double v) {
  auto* p = static_cast<uint8_t*>(dst);
  switch (dt) {
    case DType::f32: return store_bytes(p, static_cast<float>(v));
    case DType::f64: return store_bytes(p, v);
    case DType::bf16: return store_bytes(p, float_to_bf16(static_cast<float>(v)).bits);
    case DType::e4m3: *p = float_to_e4m3(static_cast<float>(v)); return;
    case DType::u8: *p = static_cast<uint8_t>(v); return;
    case DType::i32: return store_bytes(p, static_cast<int32_t>(v));
    case DType::i64: return store_bytes(p, static_cast<int64_t>(v));
    case DType::f16: return;
  }
}

}  // namespace mla::detail
