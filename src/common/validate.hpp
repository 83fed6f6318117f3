// Argument checks shared by every entry point. Each returns a Status whose
// message names the argument and the bad value, e.g.
//   "q: shape [4, 1, 128, 512] does not match [B, s_q, h_q, 576] (dim 3 is 512, expected 576)".
#pragma once
#include <fmt/format.h>

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "mla/kv_cache.hpp"
#include "mla/status.hpp"
#include "mla/tensor.hpp"

namespace mla::detail {

inline constexpr int64_t kAny = -1;

std::string shape_str(const TensorView& t);

template <class... Args>
Status error(Errc c, fmt::format_string<Args...> f, Args&&... args) {
  return Status(c, fmt::format(f, std::forward<Args>(args)...));
}

// A given view (ndim >= 0) whose data is not null unless it is empty, and
// whose element count and byte extent fit 64-bit arithmetic (expect_extent).
Status expect_defined(const TensorView& t, const char* name);

// The elements a view spans: numel (0: empty) and the lowest and highest
// element offsets any index reaches (from shape and strides).
struct Extent {
  int64_t numel = 0;
  int64_t lo = 0, hi = 0;  // element offsets, inclusive; 0, 0 when empty
};
// Computes it with every product and sum checked; a shape/stride combination
// whose element count, offsets or byte size (offsets * dtype size) overflow
// int64, or whose addresses wrap around the address space, is invalid_shape
// naming the view, its shape and strides.
Status expect_extent(const TensorView& t, const char* name, Extent* e = nullptr);

// The byte range [lo, hi) a view touches; lo == hi for an empty or undefined
// view. Only for views that passed expect_extent.
struct ByteRange {
  uintptr_t lo = 0, hi = 0;
  bool empty() const { return lo == hi; }
};
ByteRange byte_range(const TensorView& t);

// A view an op writes: no two indices may address one element. A stride of 0
// in a dim of size > 1 (broadcast) and dims whose strides interleave are
// invalid_stride. Empty views always pass.
Status expect_no_self_overlap(const TensorView& t, const char* name);

// A view with its argument name, for the overlap checks.
struct Named {
  const TensorView* view;
  const char* name;
};
// Every output must touch no byte of another output or of an input: the
// byte ranges (byte_range) must be disjoint, so two interleaved views count as
// overlapping even when their elements differ. Each output must also pass
// expect_no_self_overlap. Undefined or empty views, views on different
// devices and shape-only views (shape_only) are skipped. An op that allows a
// particular output to alias an input documents it and leaves that input out.
Status expect_disjoint(std::span<const Named> outputs, std::span<const Named> inputs);
inline Status expect_disjoint(std::initializer_list<Named> outputs,
                              std::initializer_list<Named> inputs) {
  return expect_disjoint(std::span<const Named>(outputs.begin(), outputs.size()),
                         std::span<const Named>(inputs.begin(), inputs.size()));
}
// The caller's workspace must not overlap any of `views` either.
Status expect_workspace_disjoint(const void* data, size_t bytes, Device device,
                                 std::span<const Named> views);
inline Status expect_workspace_disjoint(const void* data, size_t bytes, Device device,
                                        std::initializer_list<Named> views) {
  return expect_workspace_disjoint(data, bytes, device,
                                   std::span<const Named>(views.begin(), views.size()));
}
// A copy of t whose null data pointer is replaced by a static, 256-byte aligned
// placeholder: the workspace-size queries validate shapes, dtypes and strides
// with the same checks as the calls, but callers may size before they own the
// buffers (the data is never read).
TensorView shape_only(TensorView t);
bool is_shape_only(const TensorView& t);
// dims: expected sizes, kAny for free. names: symbolic names for the message.
Status expect_shape(const TensorView& t, const char* name, std::initializer_list<int64_t> dims,
                    const char* symbolic);
Status expect_dtype(const TensorView& t, const char* name, std::initializer_list<DType> allowed);
// The last `n` dims are dense row-major (stride of the last is 1, etc.) and no
// stride is negative. An empty view (a dim of 0) passes whatever its strides:
// it addresses nothing (NumPy gives empty arrays zero strides).
Status expect_inner_contiguous(const TensorView& t, const char* name, int n);
Status expect_same_device(const TensorView& a, const char* an, const TensorView& b, const char* bn);
// The pointer and the outer strides are multiples of `bytes`; empty views pass.
Status expect_aligned(const TensorView& t, const char* name, size_t bytes);
// The attention ops' softmax_scale: finite and > 0.
Status expect_softmax_scale(float softmax_scale);

// A validated cache that `who` (a step that dequantizes fp8_ds_mla tiles
// itself) can read: bf16 or fp8_ds_mla, never fp8_e4m3.
Status expect_cache_for(const KvCacheView& cache, const char* name, const char* who);

}  // namespace mla::detail
