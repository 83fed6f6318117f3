// The sizes of one layer_forward call, derived the same way by the CPU reference and the
// CUDA path: B requests of s_q new tokens each (N rows), H heads with their nope, rope and
// value dims.
#pragma once
#include <cstdint>

#include "mla/layer.hpp"

namespace mla::detail {

struct LayerShape {
  int64_t B = 0, s_q = 0, N = 0, H = 0, dn = 0, dr = 0, dv = 0;
};

inline LayerShape layer_shape(const LayerForwardArgs& a) {
  LayerShape s;
  s.B = a.hidden.shape[0];
  s.s_q = a.hidden.shape[1];
  s.N = s.B * s.s_q;
  s.H = a.config.heads;
  s.dn = a.config.d_nope;
  s.dr = a.config.d_rope;
  s.dv = a.config.d_v;
  return s;
}

}  // namespace mla::detail
