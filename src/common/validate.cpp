#include "common/validate.hpp"

#include <cmath>
#include <cstdint>

namespace mla::detail {

std::string shape_str(const TensorView& t) {
  if (!t.defined()) return "<undefined>";
  std::string s = "[";
  for (int i = 0; i < t.ndim; ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
  return s + "]";
}

TensorView shape_only(TensorView t) {
  alignas(256) static const char placeholder[1] = {};
  if (t.defined() && t.data == nullptr) t.data = const_cast<char*>(placeholder);
  return t;
}

Status expect_defined(const TensorView& t, const char* name) {
  if (!t.defined()) return error(Errc::invalid_shape, "{}: required tensor not given", name);
  if (t.data == nullptr && t.numel() > 0)
    return error(Errc::invalid_value, "{}: data pointer is null for shape {}", name, shape_str(t));
  return Status::Ok();
}

Status expect_shape(const TensorView& t, const char* name, std::initializer_list<int64_t> dims,
                    const char* symbolic) {
  MLA_TRY(expect_defined(t, name));
  if (t.ndim != static_cast<int>(dims.size()))
    return error(Errc::invalid_shape, "{}: shape {} has {} dims, expected {} ({})", name,
                 shape_str(t), t.ndim, dims.size(), symbolic);
  int d = 0;
  for (int64_t want : dims) {
    if (t.shape[d] < 0)
      return error(Errc::invalid_shape, "{}: shape {} has negative dim {}", name, shape_str(t), d);
    if (want != kAny && t.shape[d] != want)
      return error(Errc::invalid_shape,
                   "{}: shape {} does not match {} (dim {} is {}, expected {})", name, shape_str(t),
                   symbolic, d, t.shape[d], want);
    ++d;
  }
  return Status::Ok();
}

Status expect_dtype(const TensorView& t, const char* name, std::initializer_list<DType> allowed) {
  std::string list;
  for (DType a : allowed) {
    if (t.dtype == a) return Status::Ok();
    list += (list.empty() ? "" : "/") + std::string(dtype_name(a));
  }
  return error(Errc::invalid_dtype, "{}: dtype {} not accepted (expected {})", name,
               dtype_name(t.dtype), list);
}

Status expect_inner_contiguous(const TensorView& t, const char* name, int n) {
  int64_t want = 1;
  for (int i = t.ndim - 1; i >= t.ndim - n && i >= 0; --i) {
    if (t.shape[i] != 1 && t.strides[i] != want)
      return error(Errc::invalid_stride,
                   "{}: stride of dim {} is {}, expected {} (dense inner dims)", name, i,
                   t.strides[i], want);
    want *= t.shape[i];
  }
  for (int i = 0; i < t.ndim; ++i)
    if (t.strides[i] < 0)
      return error(Errc::invalid_stride, "{}: negative stride {} in dim {}", name, t.strides[i], i);
  return Status::Ok();
}

Status expect_same_device(const TensorView& a, const char* an, const TensorView& b,
                          const char* bn) {
  if (!(a.device == b.device))
    return error(Errc::invalid_device, "{} is on {}:{} but {} is on {}:{}", bn,
                 b.device.type == DeviceType::cuda ? "cuda" : "cpu", b.device.id, an,
                 a.device.type == DeviceType::cuda ? "cuda" : "cpu", a.device.id);
  return Status::Ok();
}

Status expect_aligned(const TensorView& t, const char* name, size_t bytes) {
  auto addr = reinterpret_cast<uintptr_t>(t.data);
  if (addr % bytes != 0)
    return error(Errc::misaligned, "{}: pointer {:#x} is not {}-byte aligned", name, addr, bytes);
  const int64_t esz = dtype_size(t.dtype);
  for (int i = 0; i < t.ndim - 1; ++i)
    if (t.shape[i] > 1 && (t.strides[i] * esz) % static_cast<int64_t>(bytes) != 0)
      return error(Errc::misaligned, "{}: stride of dim {} ({} bytes) is not a multiple of {}",
                   name, i, t.strides[i] * esz, bytes);
  return Status::Ok();
}

Status expect_softmax_scale(float softmax_scale) {
  if (!std::isfinite(softmax_scale) || softmax_scale <= 0.f)
    return error(Errc::invalid_value, "softmax_scale = {} must be finite and > 0", softmax_scale);
  return Status::Ok();
}

}  // namespace mla::detail
