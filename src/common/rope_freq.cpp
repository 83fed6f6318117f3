#include "common/rope_freq.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace mla::detail {
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

}  // namespace mla::detail
