// Constants of the mma_sync sparse attention kernel (sparse_mma_kernel.cuh):
// threads, padded row sizes, the head block and tile choice, and the
// shared-memory layout of one instantiation (Traits).
#pragma once
#include "mla/dims.hpp"
#include "mla/kv_cache.hpp"

namespace mla::cuda::sparse::mma {

// Heads per CTA: the largest of 64, 32, 16 that divides h_q (0: none does).
constexpr int head_block(int h_q) {
  return h_q % 64 == 0 ? 64 : h_q % 32 == 0 ? 32 : h_q % 16 == 0 ? 16 : 0;
}
// Keys per tile for a head block of hb heads: fewer keys where more heads
// share the shared memory.
constexpr int tile_keys(int hb) {
  return hb == 16 ? 64 : 32;
}

inline constexpr int kThreads = 256;
inline constexpr int kRowBytes =
    kDqk * 2 + 16;  // padded: 73 x 16 B, odd, so ldmatrix rows spread over banks
inline constexpr int kFp8Entry = Fp8DsMlaLayout::kEntryBytes;
inline constexpr float kLog2e = 1.4426950408889634f;

template <int HB, bool kFp8>
struct Traits {
  static constexpr int kMT = HB / 16;
  static constexpr int kWPM = 8 / kMT;
  static constexpr int kNK = tile_keys(HB);  // keys per tile
  static constexpr int kKW = kNK / kWPM;     // keys per warp in S
  static constexpr int kDVW = kDv / kWPM;    // value columns per warp in O
  static constexpr int kStages = kNK == 64 ? 2 : 3;
  static_assert(HB == 16 || HB == 32 || HB == 64, "head blocks of 16, 32 or 64");
  static_assert(kKW == 8 || kKW == 16, "S loads B fragments for 8 or 16 keys per warp");
  static constexpr int kQBytes = HB * kRowBytes;
  static constexpr int kTileBytes = kNK * kRowBytes;
  static constexpr int kStageBytes = kFp8 ? kNK * kFp8Entry : kTileBytes;
  static constexpr int kPRow = kNK * 2 + 16;  // bf16 P row, padded (odd multiple of 16 B)
  // layout
  static constexpr int kOffQ = 0;
  static constexpr int kOffStages = kOffQ + kQBytes;
  static constexpr int kOffTile = kOffStages + kStages * kStageBytes;  // fp8: dequantised tile
  static constexpr int kOffP = kOffTile + (kFp8 ? kTileBytes : 0);
  static constexpr int kOffMax = kOffP + HB * kPRow;
  static constexpr int kOffSum = kOffMax + kWPM * HB * 4;
  static constexpr int kOffOk = kOffSum + kWPM * HB * 4;
  static constexpr int kSmem = kOffOk + kStages * kNK * 4;
  static_assert(kSmem <= 227 * 1024, "fits the 227 KB a Hopper CTA may use");
};

}  // namespace mla::cuda::sparse::mma
