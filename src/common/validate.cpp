#include "common/validate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "common/checked.hpp"

namespace mla::detail {

std::string shape_str(const TensorView& t) {
  if (!t.defined()) return "<undefined>";
  std::string s = "[";
  for (int i = 0; i < t.ndim; ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
  return s + "]";
}

namespace {
alignas(256) const char kPlaceholder[1] = {};

std::string strides_str(const TensorView& t) {
  std::string s = "[";
  for (int i = 0; i < t.ndim; ++i) s += (i ? ", " : "") + std::to_string(t.strides[i]);
  return s + "]";
}
}  // namespace

TensorView shape_only(TensorView t) {
  if (t.defined() && t.data == nullptr) t.data = const_cast<char*>(kPlaceholder);
  return t;
}

bool is_shape_only(const TensorView& t) {
  return t.data == kPlaceholder;
}

Status expect_extent(const TensorView& t, const char* name, Extent* out) {
  Extent e;
  auto bad = [&](const char* what) {
    return error(Errc::invalid_shape,
                 "{}: shape {} with strides {}: {} overflows 64-bit arithmetic", name, shape_str(t),
                 strides_str(t), what);
  };
  if (t.ndim < 0 || t.ndim > kMaxDims)
    return error(Errc::invalid_shape, "{}: ndim = {} is outside [0, {}]", name, t.ndim, kMaxDims);
  e.numel = 1;
  for (int d = 0; d < t.ndim; ++d) {
    if (t.shape[d] < 0)
      return error(Errc::invalid_shape, "{}: shape {} has negative dim {}", name, shape_str(t), d);
    if (!mul_ok(e.numel, t.shape[d], &e.numel)) {
      // A product past int64 with a zero dim later is still empty.
      if (std::find(t.shape, t.shape + t.ndim, 0) != t.shape + t.ndim) {
        e.numel = 0;
        break;
      }
      return bad("the element count");
    }
  }
  if (e.numel > 0) {
    for (int d = 0; d < t.ndim; ++d) {
      int64_t span = 0;
      if (!mul_ok(t.shape[d] - 1, t.strides[d], &span)) return bad("the element offsets");
      if (!add_ok(span < 0 ? e.lo : e.hi, span, span < 0 ? &e.lo : &e.hi))
        return bad("the element offsets");
    }
    const int64_t esz = dtype_size(t.dtype) > 0 ? dtype_size(t.dtype) : 1;
    int64_t diff = 0, count = 0, bytes = 0, lo_bytes = 0;
    if (__builtin_sub_overflow(e.hi, e.lo, &diff) || !add_ok(diff, 1, &count) ||
        !mul_ok(count, esz, &bytes) || !mul_ok(e.lo, esz, &lo_bytes))
      return bad("the byte extent");
    // The addresses [data + lo_bytes, data + lo_bytes + bytes) must not wrap.
    const auto addr = reinterpret_cast<uintptr_t>(t.data);
    const uintptr_t below = uintptr_t(0) - static_cast<uintptr_t>(lo_bytes);  // lo_bytes <= 0
    if (below > addr || uintptr_t(bytes) > UINTPTR_MAX - (addr - below))
      return error(Errc::invalid_shape,
                   "{}: shape {} with strides {} from address {:#x} wraps around the address space",
                   name, shape_str(t), strides_str(t), addr);
  }
  if (out != nullptr) *out = e;
  return Status::Ok();
}

ByteRange byte_range(const TensorView& t) {
  Extent e;
  if (!t.defined() || !expect_extent(t, "", &e).ok() || e.numel == 0) return {};
  const int64_t esz = dtype_size(t.dtype);
  const auto addr = reinterpret_cast<uintptr_t>(t.data);
  const uintptr_t lo = addr + static_cast<uintptr_t>(e.lo * esz);  // e.lo <= 0: wraps down
  return {lo, lo + static_cast<uintptr_t>((e.hi - e.lo + 1) * esz)};
}

Status expect_no_self_overlap(const TensorView& t, const char* name) {
  if (!t.defined()) return Status::Ok();
  Extent e;
  MLA_TRY(expect_extent(t, name, &e));  // bounds every product below
  if (e.numel == 0) return Status::Ok();
  // Dims of size > 1 by |stride|: each must step past everything the smaller
  // ones reach, or two indices meet (a sufficient condition for no overlap;
  // the layouts it rejects are not ones a kernel writes anyway).
  int order[kMaxDims];
  int n = 0;
  for (int d = 0; d < t.ndim; ++d) {
    if (t.shape[d] <= 1) continue;
    if (t.strides[d] == 0)
      return error(Errc::invalid_stride,
                   "{}: stride 0 in dim {} (size {}): every index of that dim writes the same "
                   "elements (a broadcast view cannot be an output)",
                   name, d, t.shape[d]);
    order[n++] = d;
  }
  for (int i = 1; i < n; ++i)  // insertion sort: at most kMaxDims entries
    for (int j = i; j > 0 && std::abs(t.strides[order[j]]) < std::abs(t.strides[order[j - 1]]); --j)
      std::swap(order[j], order[j - 1]);
  int64_t reach = 0;  // the largest offset the dims so far span (>= 0)
  for (int i = 0; i < n; ++i) {
    const int d = order[i];
    const int64_t st = std::abs(t.strides[d]);
    if (st <= reach)
      return error(Errc::invalid_stride,
                   "{}: strides {} for shape {} make elements overlap (dim {} steps {} but the "
                   "smaller dims reach offset {}); an output needs distinct elements",
                   name, strides_str(t), shape_str(t), d, t.strides[d], reach);
    reach += (t.shape[d] - 1) * st;  // bounded: expect_extent passed
  }
  return Status::Ok();
}

Status expect_disjoint(std::span<const Named> outputs, std::span<const Named> inputs) {
  auto skip = [](const TensorView& t) { return !t.defined() || is_shape_only(t); };
  for (const Named& o : outputs) {
    if (skip(*o.view)) continue;
    MLA_TRY(expect_no_self_overlap(*o.view, o.name));
    const ByteRange ro = byte_range(*o.view);
    if (ro.empty()) continue;
    auto check = [&](const Named& other, const char* role) -> Status {
      if (other.view == o.view || skip(*other.view) || !(other.view->device == o.view->device))
        return Status::Ok();
      const ByteRange r = byte_range(*other.view);
      if (r.empty() || r.hi <= ro.lo || ro.hi <= r.lo) return Status::Ok();
      return error(Errc::invalid_value,
                   "{} (bytes {:#x}..{:#x}) overlaps {} {} (bytes {:#x}..{:#x}): outputs must not "
                   "share memory with {}",
                   o.name, ro.lo, ro.hi, role, other.name, r.lo, r.hi,
                   std::string(role) == "input" ? "the inputs" : "each other");
    };
    for (const Named& i : inputs) MLA_TRY(check(i, "input"));
    for (const Named& p : outputs) MLA_TRY(check(p, "output"));
  }
  return Status::Ok();
}

Status expect_workspace_disjoint(const void* data, size_t bytes, Device device,
                                 std::span<const Named> views) {
  if (data == nullptr || bytes == 0) return Status::Ok();
  const auto lo = reinterpret_cast<uintptr_t>(data);
  if (bytes > UINTPTR_MAX - lo)
    return error(Errc::invalid_value,
                 "workspace: {} bytes from address {:#x} wrap around the address space", bytes, lo);
  const uintptr_t hi = lo + bytes;
  for (const Named& v : views) {
    if (!v.view->defined() || is_shape_only(*v.view) || !(v.view->device == device)) continue;
    const ByteRange r = byte_range(*v.view);
    if (r.empty() || r.hi <= lo || hi <= r.lo) continue;
    return error(
        Errc::invalid_value,
        "workspace (bytes {:#x}..{:#x}) overlaps {} (bytes {:#x}..{:#x}): the op's scratch "
        "would overwrite it",
        lo, hi, v.name, r.lo, r.hi);
  }
  return Status::Ok();
}

Status expect_defined(const TensorView& t, const char* name) {
  if (!t.defined()) return error(Errc::invalid_shape, "{}: required tensor not given", name);
  Extent e;
  MLA_TRY(expect_extent(t, name, &e));
  if (t.data == nullptr && e.numel > 0)
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
  if (t.numel() == 0) return Status::Ok();  // addresses nothing
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
  if (t.numel() == 0) return Status::Ok();  // nothing is loaded
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

Status expect_cache_for(const KvCacheView& cache, const char* name, const char* who) {
  MLA_TRY(validate_kv_cache(cache, name));
  if (cache.format == KvFormat::fp8_e4m3)
    return error(Errc::unsupported,
                 "{}: {} takes bf16 or fp8_ds_mla caches (fp8_e4m3 serves decode, sparse decode "
                 "and append_kv)",
                 name, who);
  return Status::Ok();
}

}  // namespace mla::detail
