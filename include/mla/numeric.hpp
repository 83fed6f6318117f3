// Exact host-side conversions for the storage types we use (bf16, fp8 e4m3fn).
// Written out bit by bit so the CPU reference does not depend on a compiler's
// half-precision support, and so the rounding is the one the formats specify:
// round to nearest, ties to even.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace mla {

struct bf16 {
  uint16_t bits = 0;
};
static_assert(sizeof(bf16) == 2, "bf16 must be 2 bytes: it aliases device bf16 buffers");

inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float bf16_to_float(bf16 h) { return bits_to_float(uint32_t(h.bits) << 16); }

inline bf16 float_to_bf16(float f) {
  uint32_t u = float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{uint16_t((u >> 16) | 0x40)};  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return bf16{uint16_t(u >> 16)};
}
inline float round_to_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

// fp8 e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities;
// 0x7f/0xff are NaN; largest finite 448; smallest subnormal 2^-9.
inline float e4m3_to_float(uint8_t v) {
  const int sign = v >> 7, exp = (v >> 3) & 0xf, man = v & 7;
  float mag;
  if (exp == 0xf && man == 7) return NAN;
  if (exp == 0) mag = std::ldexp(float(man), -9);  // subnormal: man/8 * 2^-6
  else mag = std::ldexp(1.0f + man / 8.0f, exp - 7);
  return sign ? -mag : mag;
}

// Saturating conversion (values past 448 clamp to +-448, as the cache quantisers
// clamp before converting). A negative value that rounds to zero keeps its sign
// (0x80), as the hardware conversion does.
inline uint8_t float_to_e4m3(float f) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  if (std::isnan(f)) return 0x7f;
  double a = std::fabs(double(f));
  if (a >= 448.0) return sign | 0x7e;
  // Quantum of the binade holding a: subnormals (a < 2^-6) step by 2^-9.
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int unbiased = e - 1;
  if (unbiased < -6) unbiased = -6;
  const double quantum = std::ldexp(1.0, unbiased - 3);
  double q = a / quantum;
  double r = std::nearbyint(q);  // default rounding mode: ties to even
  double mag = r * quantum;
  if (mag >= 448.0) return sign | 0x7e;  // (cannot exceed after the clamp, kept for safety)
  // Encode mag exactly.
  if (mag == 0.0) return sign;
  int me;
  std::frexp(mag, &me);
  int ue = me - 1;
  if (ue < -6) {  // subnormal
    int man = int(std::lround(mag / std::ldexp(1.0, -9)));
    return sign | uint8_t(man);
  }
  int man = int(std::lround((mag / std::ldexp(1.0, ue) - 1.0) * 8.0));
  if (man == 8) {  // rounding carried into the next binade
    man = 0;
    ++ue;
  }
  return sign | uint8_t(((ue + 7) << 3) | man);
}

}  // namespace mla
