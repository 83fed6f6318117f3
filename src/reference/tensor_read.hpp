// Element access to strided tensor views of any storage dtype, for the CPU
// reference: it reads every input as double and writes outputs by rounding to
// the output's dtype. Slow and simple on purpose (the reference is an oracle).
#pragma once
#include <cstdint>
#include <cstring>
#include <initializer_list>

#include "common/element.hpp"
#include "mla/tensor.hpp"

namespace mla::reference {

inline double load_at(const TensorView& t, int64_t off) {
  return detail::load_element(t.dtype,
                              static_cast<const char*>(t.data) + off * dtype_size(t.dtype));
}

inline int64_t load_int_at(const TensorView& t, int64_t off) {
  const char* p = static_cast<const char*>(t.data) + off * dtype_size(t.dtype);
  if (t.dtype == DType::i64) {
    int64_t v;
    std::memcpy(&v, p, 8);
    return v;
  }
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Rounds to the destination dtype (see common/element.hpp).
inline void store_at(const TensorView& t, int64_t off, double v) {
  detail::store_element(t.dtype, static_cast<char*>(t.data) + off * dtype_size(t.dtype), v);
}
inline void store_int_at(const TensorView& t, int64_t off, int64_t v) {
  char* p = static_cast<char*>(t.data) + off * dtype_size(t.dtype);
  if (t.dtype == DType::i64) {
    std::memcpy(p, &v, 8);
    return;
  }
  const int32_t i = static_cast<int32_t>(v);
  std::memcpy(p, &i, 4);
}

inline double read(const TensorView& t, std::initializer_list<int64_t> idx) {
  return load_at(t, t.offset(idx));
}
inline int64_t read_int(const TensorView& t, std::initializer_list<int64_t> idx) {
  return load_int_at(t, t.offset(idx));
}
inline void write(const TensorView& t, std::initializer_list<int64_t> idx, double v) {
  store_at(t, t.offset(idx), v);
}
inline void write_int(const TensorView& t, std::initializer_list<int64_t> idx, int64_t v) {
  store_int_at(t, t.offset(idx), v);
}

// Row `row` of a 2-D tensor [rows, n].
inline void read_row_f32(const TensorView& t, int64_t row, float* out, int n) {
  for (int i = 0; i < n; ++i)
    out[i] = static_cast<float>(load_at(t, row * t.strides[0] + i * t.strides[1]));
}
inline void write_row(const TensorView& t, int64_t row, const double* v, int n) {
  for (int i = 0; i < n; ++i) store_at(t, row * t.strides[0] + i * t.strides[1], v[i]);
}

}  // namespace mla::reference
