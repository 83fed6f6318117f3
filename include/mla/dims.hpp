// Model dimensions of the attention (DeepSeek-V3/V3.2 by default) and the
// softmax scale V3.2 uses.
#pragma once
#include <cmath>

namespace mla {

struct MlaDims {
  int h_q = 128;     // query heads on this GPU (16/32/64 under tensor parallelism)
  int d_c = 512;     // latent (kv_lora_rank)
  int d_r = 64;      // decoupled rope dims
  int d_nope = 128;  // per-head nope dims of q/k in the non-absorbed form
  int d_v = 128;     // per-head value dims in the non-absorbed form
  constexpr int d_qk_absorbed() const { return d_c + d_r; }  // 576
  constexpr int d_qk_mha() const { return d_nope + d_r; }    // 192
};

inline constexpr int kDc = 512;
inline constexpr int kDr = 64;
inline constexpr int kDqk = kDc + kDr;  // 576: absorbed query/key width
inline constexpr int kDv = kDc;         // 512: absorbed value width (= c_kv)

// YaRN attention-scale correction: mscale = 0.1 * mscale_all_dim * ln(factor) + 1.
inline double yarn_mscale(double factor, double mscale_all_dim = 1.0) {
  return factor <= 1.0 ? 1.0 : 0.1 * mscale_all_dim * std::log(factor) + 1.0;
}
// DeepSeek-V3.2: qk_head_dim 192, rope factor 40, mscale_all_dim 1 -> 0.135234...
inline double deepseek_v32_softmax_scale() {
  const double m = yarn_mscale(40.0, 1.0);
  return m * m / std::sqrt(192.0);
}

}  // namespace mla
