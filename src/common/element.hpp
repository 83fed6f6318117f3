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

// f16 has no conversion here (no op accepts it): it reads as NaN.
inline double load_element(DType dt, const void* src) {
  const auto* p = static_cast<const uint8_t*>(src);
  switch (dt) {
    case DType::f32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::f64: {
      double v;
      std::memcpy(&v, p, 8);
      return v;
    }
    case DType::bf16: {
      bf16 v;
      std::memcpy(&v.bits, p, 2);
      return bf16_to_float(v);
    }
    case DType::e4m3: return e4m3_to_float(*p);
    case DType::u8: return *p;
    case DType::i32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::i64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
    case DType::f16: break;
  }
  return std::numeric_limits<double>::quiet_NaN();
}

// f16: nothing is written (no op accepts it).
inline void store_element(DType dt, void* dst, double v) {
  auto* p = static_cast<uint8_t*>(dst);
  switch (dt) {
    case DType::f32: {
      const float f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
      return;
    }
    case DType::f64: std::memcpy(p, &v, 8); return;
    case DType::bf16: {
      const bf16 h = float_to_bf16(static_cast<float>(v));
      std::memcpy(p, &h.bits, 2);
      return;
    }
    case DType::e4m3: *p = float_to_e4m3(static_cast<float>(v)); return;
    case DType::u8: *p = static_cast<uint8_t>(v); return;
    case DType::i32: {
      const int32_t i = static_cast<int32_t>(v);
      std::memcpy(p, &i, 4);
      return;
    }
    case DType::i64: {
      const int64_t i = static_cast<int64_t>(v);
      std::memcpy(p, &i, 8);
      return;
    }
    case DType::f16: return;
  }
}

}  // namespace mla::detail
