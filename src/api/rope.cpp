// RoPE entry points: validation, then the CPU reference (no CUDA kernel yet:
// the rope is fused into the kernels that consume q and k).
#include "mla/rope.hpp"

#include <algorithm>
#include <cmath>

#include "api/backend.hpp"
#include "api/rope_checks.hpp"
#include "common/rope_freq.hpp"
#include "common/validate.hpp"
#include "mla/dims.hpp"
#include "reference/rope_ref.hpp"
#include "reference/tensor_read.hpp"

namespace mla {
namespace detail {

Status validate_rope_config(const RopeConfig& c, const char* p) {
  if (c.dim <= 0 || c.dim % 2 != 0)
    return error(Errc::invalid_value, "{}.dim = {} must be even and > 0", p, c.dim);
  if (!std::isfinite(c.theta) || c.theta <= 1.0)
    return error(Errc::invalid_value, "{}.theta = {} must be finite and > 1", p, c.theta);
  if (!std::isfinite(c.factor) || c.factor <= 0.0)
    return error(Errc::invalid_value, "{}.factor = {} must be finite and > 0", p, c.factor);
  if (c.factor > 1.0) {
    if (c.original_max_position <= 0)
      return error(Errc::invalid_value, "{}.original_max_position = {} must be > 0", p,
                   c.original_max_position);
    if (!(c.beta_fast > 0.0) || !(c.beta_slow > 0.0) || !std::isfinite(c.beta_fast) ||
        c.beta_fast < c.beta_slow)
      return error(Errc::invalid_value,
                   "{}.beta_fast = {} and {}.beta_slow = {} must be finite with "
                   "beta_fast >= beta_slow > 0",
                   p, c.beta_fast, p, c.beta_slow);
  }
  if (!std::isfinite(c.mscale) || !std::isfinite(c.mscale_all_dim))
    return error(Errc::invalid_value, "{}.mscale = {} / {}.mscale_all_dim = {} must be finite", p,
                 c.mscale, p, c.mscale_all_dim);
  return Status::Ok();
}

}  // namespace detail

namespace {

Status expect_rope_float(const TensorView& t, const char* name) {
  if (detail::on_cuda(t.device)) return detail::expect_dtype(t, name, {DType::f32});
  return detail::expect_dtype(t, name, {DType::f32, DType::f64});
}

}  // namespace

double rope_attention_factor(const RopeConfig& c) {
  return yarn_mscale(c.factor, c.mscale) / yarn_mscale(c.factor, c.mscale_all_dim);
}

Status rope_inv_freq(const RopeConfig& config, TensorView inv_freq) {
  MLA_TRY(detail::validate_rope_config(config, "config"));
  MLA_TRY(detail::expect_shape(inv_freq, "inv_freq", {config.dim / 2}, "[dim / 2]"));
  MLA_TRY(detail::expect_known_device(inv_freq, "inv_freq"));
  if (detail::on_cuda(inv_freq.device)) return detail::no_cuda_backend("rope_inv_freq");
  MLA_TRY(expect_rope_float(inv_freq, "inv_freq"));
  const std::vector<double> f = detail::yarn_inv_freq(config);
  for (int j = 0; j < config.dim / 2; ++j) reference::write(inv_freq, {j}, f[j]);
  return Status::Ok();
}

Status apply_rope(const ApplyRopeArgs& a, const ExecContext& ctx) {
  MLA_TRY(detail::validate_rope_config(a.config, "config"));
  MLA_TRY(detail::expect_shape(a.x, "x", {detail::kAny, detail::kAny, a.config.dim},
                               "[T, heads, config.dim]"));
  MLA_TRY(detail::expect_known_device(a.x, "x"));
  const int64_t T = a.x.shape[0], H = a.x.shape[1];
  MLA_TRY(detail::expect_shape(a.out, "out", {T, H, a.config.dim}, "[T, heads, config.dim] (x's)"));
  MLA_TRY(detail::expect_shape(a.positions, "positions", {T}, "[T]"));
  MLA_TRY(expect_rope_float(a.x, "x"));
  MLA_TRY(expect_rope_float(a.out, "out"));
  MLA_TRY(detail::expect_dtype(a.positions, "positions", {DType::i32, DType::i64}));
  MLA_TRY(detail::expect_inner_contiguous(a.x, "x", 1));
  MLA_TRY(detail::expect_inner_contiguous(a.out, "out", 1));
  MLA_TRY(detail::expect_inner_contiguous(a.positions, "positions", 1));
  MLA_TRY(detail::expect_same_device(a.x, "x", a.out, "out"));
  MLA_TRY(detail::expect_same_device(a.x, "x", a.positions, "positions"));
  // out may be x itself (in place, documented); any other overlap is rejected.
  const bool in_place = a.out.data == a.x.data && a.out.dtype == a.x.dtype &&
                        std::equal(a.x.strides, a.x.strides + a.x.ndim, a.out.strides);
  if (in_place)
    MLA_TRY(detail::expect_disjoint({{&a.out, "out"}}, {{&a.positions, "positions"}}));
  else
    MLA_TRY(detail::expect_disjoint({{&a.out, "out"}}, {{&a.x, "x"}, {&a.positions, "positions"}}));
  if (detail::on_cuda(a.x.device)) return detail::no_cuda_backend("apply_rope");
  for (int64_t t = 0; t < T; ++t) {
    const int64_t p = reference::read_int(a.positions, {t});
    if (p < 0) return detail::error(Errc::out_of_range, "positions[{}] = {} is negative", t, p);
  }
  if (a.out.numel() == 0) return Status::Ok();  // T = 0: nothing to write
  return reference::apply_rope(a);
}

}  // namespace mla
