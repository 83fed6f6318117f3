// Argument checks shared by every entry point. Each returns a Status whose
// message names the argument and the bad value, e.g.
//   "q: shape [4, 1, 128, 512] does not match [B, s_q, h_q, 576] (dim 3 is 512, expected 576)".
#pragma once
#include <fmt/format.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "mla/status.hpp"
#include "mla/tensor.hpp"

namespace mla::detail {

inline constexpr int64_t kAny = -1;

std::string shape_str(const TensorView& t);

template <class... Args>
Status error(Errc c, fmt::format_string<Args...> f, Args&&... args) {
  return Status(c, fmt::format(f, std::forward<Args>(args)...));
}

Status expect_defined(const TensorView& t, const char* name);
// A copy of t whose null data pointer is replaced by a static, 256-byte aligned
// placeholder: the workspace-size queries validate shapes, dtypes and strides
// with the same checks as the calls, but callers may size before they own the
// buffers (the data is never read).
TensorView shape_only(TensorView t);
// dims: expected sizes, kAny for free. names: symbolic names for the message.
Status expect_shape(const TensorView& t, const char* name, std::initializer_list<int64_t> dims,
                    const char* symbolic);
Status expect_dtype(const TensorView& t, const char* name, std::initializer_list<DType> allowed);
// The last `n` dims are dense row-major (stride of the last is 1, etc.).
Status expect_inner_contiguous(const TensorView& t, const char* name, int n);
Status expect_same_device(const TensorView& a, const char* an, const TensorView& b, const char* bn);
Status expect_aligned(const TensorView& t, const char* name, size_t bytes);
// The attention ops' softmax_scale: finite and > 0.
Status expect_softmax_scale(float softmax_scale);

}  // namespace mla::detail
