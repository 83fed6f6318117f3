// RoPE configs across the C ABI, both directions, shared by every C function
// that takes or returns one (rope, layer).
#pragma once
#include "mla/c_api.h"
#include "mla/rope.hpp"

namespace mla::capi {

inline RopeConfig rope_from_c(const mla_rope_config& r) {
  return RopeConfig{r.dim,       r.theta,     r.factor, r.original_max_position,
                    r.beta_fast, r.beta_slow, r.mscale, r.mscale_all_dim};
}

inline mla_rope_config rope_to_c(const RopeConfig& r) {
  return mla_rope_config{
      r.dim,       0,           r.theta,  r.factor,        r.original_max_position,
      r.beta_fast, r.beta_slow, r.mscale, r.mscale_all_dim};
}

}  // namespace mla::capi
