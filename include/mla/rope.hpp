// Rotary position embedding as DeepSeek-V3/V3.2 apply it: YaRN-scaled inverse
// frequencies over the 64 rope dims, rotated as interleaved pairs (2i, 2i+1)
// in MLA's q_rope/k_rope and as half-split pairs (i, i + d/2) in V3.2's
// lightning indexer.
#pragma once
#include <cstdint>

#include "mla/status.hpp"
#include "mla/tensor.hpp"

namespace mla {

// YaRN ("NTK-by-parts") parameters, named as in the model configs.
struct RopeConfig {
  int dim = 64;                          // qk_rope_head_dim
  double theta = 10000.0;                // rope_theta
  double factor = 40.0;                  // rope_scaling.factor (1: plain RoPE)
  int64_t original_max_position = 4096;  // original_max_position_embeddings
  double beta_fast = 32.0;               // rotations where interpolation starts
  double beta_slow = 1.0;                // rotations where it is complete
  double mscale = 1.0;                   // scale of cos/sin: yarn_mscale(factor, mscale)
  double mscale_all_dim = 1.0;           //   / yarn_mscale(factor, mscale_all_dim)
};
// DeepSeek-V3 and V3.2 (the two share the rope configuration).
inline RopeConfig deepseek_v3_rope() {
  return RopeConfig{};
}

// inv_freq[j], j < dim/2:  base_j = theta^(-2j/dim);  with factor > 1,
//   inv_freq[j] = base_j / factor * (1 - s_j) + base_j * s_j,
// where s_j = 1 - clamp((j - lo) / (hi - lo), 0, 1) keeps the fast
// (high-frequency) dims unscaled and interpolates the slow ones by `factor`;
// lo = max(floor(d(beta_fast)), 0), hi = min(ceil(d(beta_slow)), dim - 1),
// d(r) = dim * ln(original_max_position / (2 pi r)) / (2 ln theta) (the dim at
// which a frequency turns r times over the original context); hi = lo + 0.001
// when they coincide. DeepSeek's inference code applies the same correction
// whenever the serving context exceeds original_max_position; we apply it
// whenever factor > 1 (a config with factor > 1 exists to serve long contexts).
// inv_freq: [dim/2] f32 or f64, CPU.
Status rope_inv_freq(const RopeConfig& config, TensorView inv_freq);

// The factor cos/sin are multiplied by: yarn_mscale(factor, mscale) /
// yarn_mscale(factor, mscale_all_dim) (1 for DeepSeek-V3, where the two match;
// V3 puts mscale^2 into the softmax scale instead, see dims.hpp).
double rope_attention_factor(const RopeConfig& config);

enum class RopeLayout : int32_t {
  interleaved = 0,  // pairs (2i, 2i+1): MLA's q_rope / k_rope
  half_split = 1,   // pairs (i, i + dim/2): V3.2's indexer q / k
};

// out[t, h, pair] = rotate(x[t, h, pair], positions[t] * inv_freq[i]):
//   (a, b) -> m (a cos - b sin, a sin + b cos), m = rope_attention_factor.
//   x, out      [T, heads, dim] f32 (f64 too on CPU); out may alias x (in place)
//   positions   [T] i32 or i64, each >= 0
struct ApplyRopeArgs {
  TensorView x;
  TensorView positions;
  TensorView out;
  RopeConfig config;
  RopeLayout layout = RopeLayout::interleaved;
};
Status apply_rope(const ApplyRopeArgs& args, const ExecContext& ctx = {});

}  // namespace mla
