#include "reference/rope_ref.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "reference/tensor_read.hpp"

namespace mla::reference {
namespace {

// The (fractional) rope dim at which a frequency turns `rotations` times over
// the original context.
double correction_dim(double rotations, const RopeConfig& c) {
  return c.dim * std::log(double(c.original_max_position) / (rotations * 2 * std::numbers::pi)) /
         (2 * std::log(c.theta));
}

}  // namespace

std::vector<double> yarn_inv_freq(const RopeConfig& c) {
  const int half = c.dim / 2;
  std::vector<double> f(half);
  for (int j = 0; j < half; ++j) f[j] = std::pow(c.theta, -2.0 * j / c.dim);
  if (c.factor <= 1.0) return f;
  const double lo = std::max(std::floor(correction_dim(c.beta_fast, c)), 0.0);
  double hi = std::min(std::ceil(correction_dim(c.beta_slow, c)), double(c.dim - 1));
  if (hi == lo) hi += 0.001;  // avoid 0/0 in the ramp
  for (int j = 0; j < half; ++j) {
    const double ramp = std::clamp((j - lo) / (hi - lo), 0.0, 1.0);  // 0: keep, 1: interpolate
    const double keep = 1.0 - ramp;
    f[j] = f[j] / c.factor * (1.0 - keep) + f[j] * keep;
  }
  return f;
}

Status apply_rope(const ApplyRopeArgs& a) {
  const std::vector<double> inv_freq = yarn_inv_freq(a.config);
  const double m = rope_attention_factor(a.config);
  const int64_t T = a.x.shape[0], H = a.x.shape[1], D = a.x.shape[2], half = D / 2;
  std::vector<double> row(D);
  for (int64_t t = 0; t < T; ++t) {
    const double pos = double(read_int(a.positions, {t}));
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t d = 0; d < D; ++d) row[d] = read(a.x, {t, h, d});  // read all: out may alias x
      for (int64_t i = 0; i < half; ++i) {
        const int64_t ia = a.layout == RopeLayout::interleaved ? 2 * i : i;
        const int64_t ib = a.layout == RopeLayout::interleaved ? 2 * i + 1 : i + half;
        const double angle = pos * inv_freq[i], cs = m * std::cos(angle), sn = m * std::sin(angle);
        write(a.out, {t, h, ia}, row[ia] * cs - row[ib] * sn);
        write(a.out, {t, h, ib}, row[ia] * sn + row[ib] * cs);
      }
    }
  }
  return Status::Ok();
}

}  // namespace mla::reference
