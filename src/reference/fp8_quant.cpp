#include "reference/fp8_quant.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "mla/numeric.hpp"

namespace mla::reference {

float pow2_ceil(float x) {
  int e;
  const float m = std::frexp(x, &e);  // x = m * 2^e, m in [0.5, 1)
  return m == 0.5f ? x : std::ldexp(1.f, e);
}

// The divisions below are fp32 divisions, as a GPU kernel computes them: the
// exact quotient can differ from the fp32 one only within half an ulp, and the
// bytes must be the ones a kernel produces.
float fp8_ds_mla_scale(float amax) {
  return pow2_ceil(std::max(amax / kE4m3Max, 1e-4f));
}

float indexer_scale(float amax) {
  return pow2_ceil(std::max(amax, 1e-4f) / kE4m3Max);
}

uint8_t quantize_e4m3(float v, float scale) {
  // scale is a power of two (fp8_ds_mla, indexer): v / scale is exact unless it
  // leaves the float range; fp8_e4m3's scale is any float: one rounding (RNE).
  const float x = std::clamp(v / scale, -kE4m3Max, kE4m3Max);
  return float_to_e4m3(x);
}

namespace {
// The amax over the finite values only: one inf or NaN must not set the scale
// of its whole group (an inf amax would give an inf scale and clip or zero
// every other value). The inf itself then saturates to +-448 * s in
// quantize_e4m3; a NaN stays NaN (fp8_quant.hpp).
float finite_abs_max(const float* v, int n) {
  float a = 0.f;
  for (int i = 0; i < n; ++i)
    if (std::isfinite(v[i])) a = std::max(a, std::fabs(v[i]));
  return a;
}
bool any_nan(const float* v, int n) {
  for (int i = 0; i < n; ++i)
    if (std::isnan(v[i])) return true;
  return false;
}
}  // namespace

void quantize_fp8_ds_mla_entry(const float* c_kv512, const float* k_rope64, uint8_t* entry) {
  using L = Fp8DsMlaLayout;
  for (int g = 0; g < L::kNumScales; ++g) {
    const float* v = c_kv512 + g * L::kGroup;
    const float s = fp8_ds_mla_scale(finite_abs_max(v, L::kGroup));
    for (int i = 0; i < L::kGroup; ++i) entry[g * L::kGroup + i] = quantize_e4m3(v[i], s);
    std::memcpy(entry + L::kScaleOffset + 4 * g, &s, 4);
  }
  for (int i = 0; i < kDr; ++i) {
    const bf16 r = float_to_bf16(k_rope64[i]);
    std::memcpy(entry + L::kRopeOffset + 2 * i, &r.bits, 2);
  }
}

void quantize_fp8_e4m3_entry(const float* c_kv512, const float* k_rope64, float scale,
                             uint8_t* entry) {
  for (int i = 0; i < kDc; ++i) entry[i] = quantize_e4m3(c_kv512[i], scale);
  for (int i = 0; i < kDr; ++i) entry[kDc + i] = quantize_e4m3(k_rope64[i], scale);
}

void dequantize_fp8_e4m3_entry(const uint8_t* entry, float scale, double* out576) {
  for (int i = 0; i < kDqk; ++i) out576[i] = double(e4m3_to_float(entry[i])) * double(scale);
}

void dequantize_fp8_ds_mla_entry(const uint8_t* entry, double* out576) {
  using L = Fp8DsMlaLayout;
  for (int g = 0; g < L::kNumScales; ++g) {
    float s;
    std::memcpy(&s, entry + L::kScaleOffset + 4 * g, 4);
    for (int i = 0; i < L::kGroup; ++i)
      out576[g * L::kGroup + i] = double(e4m3_to_float(entry[g * L::kGroup + i])) * double(s);
  }
  for (int i = 0; i < kDr; ++i) {
    bf16 r;
    std::memcpy(&r.bits, entry + L::kRopeOffset + 2 * i, 2);
    out576[kDc + i] = bf16_to_float(r);
  }
}

void quantize_indexer_vector(const float* v128, uint8_t* codes128, float* scale) {
  const float s = indexer_scale(finite_abs_max(v128, kIndexerDim));
  for (int i = 0; i < kIndexerDim; ++i) codes128[i] = quantize_e4m3(v128[i], s);
  // A vector with a NaN gets a NaN scale: every logit it takes part in is
  // NaN (the scale multiplies the ReLU sum, which a NaN code alone would not
  // reach: ReLU maps a NaN dot to 0), so top-k never selects the key, and a
  // NaN query selects nothing.
  *scale = any_nan(v128, kIndexerDim) ? std::numeric_limits<float>::quiet_NaN() : s;
}

}  // namespace mla::reference
