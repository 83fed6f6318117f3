// The FP8 quantisers of docs/design.md section 2, written once and shared by the
// CPU reference, the cache writer and the GPU tests (which compare kernel bytes
// against these bytes).
//
// Two scale rules exist in the field and both are powers of two (so the
// division v / s is exact and the scale is a pure exponent, "ue8m0"):
//   fp8_ds_mla latent cache  s = 2^ceil(log2(max(amax / 448, 1e-4)))
//   lightning indexer        s = 2^ceil(log2(max(amax, 1e-4) / 448))
// They differ only in where the 1e-4 floor applies; both are kept exactly as
// the primary sources write them.
//
// Non-finite values (every backend must produce the same bytes):
//  - amax is taken over the finite values of the group / vector only, so one
//    inf or NaN never changes the scale of its neighbours;
//  - +-inf saturates to +-448 (the code 0x7e / 0xfe), i.e. +-448 * s;
//  - NaN stays NaN: the code 0x7f (e4m3fn's NaN);
//  - an indexer vector (key token or query head) holding a NaN also gets a NaN
//    scale, so its logits are NaN whatever the ReLU does, and top-k
//    (mla/topk.hpp: NaN is never selected) drops the key / selects nothing.
#pragma once
#include <cstdint>

#include "mla/indexer.hpp"
#include "mla/kv_cache.hpp"

namespace mla::reference {

inline constexpr float kE4m3Max = 448.f;

// The smallest power of two >= x, for finite x > 0. Computed from the exponent
// bits (frexp), not from log2(), so a value that is exactly a power of two maps
// to itself and nothing is lost to a libm rounding.
float pow2_ceil(float x);

// Scale of one 128-value group of the fp8_ds_mla entry, from the group's amax.
float fp8_ds_mla_scale(float amax);
// Scale of one indexer vector (a key token, or a query head), from its amax.
float indexer_scale(float amax);

// e4m3(clamp(v / s, -448, 448)): round to nearest even, -0 stays 0x80; inf
// saturates to +-448, NaN gives 0x7f.
uint8_t quantize_e4m3(float v, float scale);

// One fp8_ds_mla entry (656 bytes, layout in mla/kv_cache.hpp) from 576 values
// [c_kv 512 ; k_rope 64]. The inputs are floats; a bf16 input is exact in them.
void quantize_fp8_ds_mla_entry(const float* c_kv512, const float* k_rope64, uint8_t* entry656);
// Dequantise: c[i] = e4m3(c8[i]) * s[i / 128] (exact in double), rope from bf16.
void dequantize_fp8_ds_mla_entry(const uint8_t* entry656, double* out576);

// One fp8_e4m3 entry (576 codes, mla/kv_cache.hpp) with the cache's scale s:
// quantize_e4m3(v, s) for every value, rope included. s is any finite float
// > 0 (the engine's calibrated k_scale): v / s is one fp32 division, rounded
// (RNE) as the CUDA append's __fdiv_rn, then RNE + satfinite to e4m3.
void quantize_fp8_e4m3_entry(const float* c_kv512, const float* k_rope64, float scale,
                             uint8_t* entry576);
// Dequantise: value i = e4m3(code[i]) * s (exact in double).
void dequantize_fp8_e4m3_entry(const uint8_t* entry576, float scale, double* out576);

// One indexer vector of 128 values -> 128 e4m3 codes and its scale.
void quantize_indexer_vector(const float* v128, uint8_t* codes128, float* scale);

}  // namespace mla::reference
