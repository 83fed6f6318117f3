// Argument checks shared by the attention entry points (dense decode, sparse
// attention, block-sparse selection): the absorbed query and the float dtypes
// of inputs and outputs.
#pragma once
#include "api/backend.hpp"
#include "common/validate.hpp"
#include "mla/dims.hpp"

namespace mla::detail {

// Float dtypes an argument accepts: the CUDA kernels' list when `cuda`, else
// that plus f64 (the reference computes in fp64; f64 in and out lets tests
// compare exactly).
inline Status expect_float_dtype(const TensorView& t, const char* name, bool cuda,
                                 bool allow_bf16) {
  if (cuda)
    return allow_bf16 ? expect_dtype(t, name, {DType::bf16, DType::f32})
                      : expect_dtype(t, name, {DType::f32});
  return allow_bf16 ? expect_dtype(t, name, {DType::bf16, DType::f32, DType::f64})
                    : expect_dtype(t, name, {DType::f32, DType::f64});
}

// The absorbed query q [B, s_q, h_q, 576] on a known device, with at least one
// head. B = 0 or s_q = 0 is a valid empty step (the op writes nothing).
inline Status expect_absorbed_query(const TensorView& q) {
  MLA_TRY(expect_shape(q, "q", {kAny, kAny, kAny, kDqk}, "[B, s_q, h_q, 576]"));
  MLA_TRY(expect_known_device(q, "q"));
  if (q.shape[2] < 1)
    return error(Errc::invalid_shape, "q: h_q = {} must be at least 1", q.shape[2]);
  return Status::Ok();
}

}  // namespace mla::detail
