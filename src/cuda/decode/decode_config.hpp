// Constants of the main decode kernel (decode_kernel.cuh): block shape,
// register split, shared-memory map, named barriers. Host code reads
// kSmemBytes and kM from here too.
#pragma once
#include <cstddef>

#include "cuda/decode/decode_params.hpp"
#include "mla/kv_cache.hpp"

namespace mla::cuda::decode {

inline constexpr int kM = 64;                             // query rows per CTA (wgmma M)
inline constexpr int kMathThreads = 256;                  // 2 math warpgroups
inline constexpr int kThreads = 384;                      // + 1 producer warpgroup
inline constexpr int kStages = 2;                         // K/V tiles in shared memory
inline constexpr int kBlockBytes = 64 * 128;              // one SW128 block: 64 rows x 64 bf16
inline constexpr int kBlocks = kDqk / 64;                 // 9 blocks across the 576 dims
inline constexpr int kTileBytes = kBlocks * kBlockBytes;  // 73728: 64 rows x 576 bf16
static_assert(kTileKeys == 64 && kM == 64, "tiles are one SW128 block tall");
// fp8_ds_mla entry: e4m3 codes, then the fp32 scales, then the bf16 rope.
inline constexpr int kFp8ScaleOffset = Fp8DsMlaLayout::kScaleOffset;  // 512
inline constexpr int kFp8RopeOffset = Fp8DsMlaLayout::kRopeOffset;    // 528

// Register split. The CTA is launched with kLaunchRegs per thread (65536 /
// 384, rounded down to 8); setmaxnreg.inc blocks until the pool has the
// registers, which only setmaxnreg.dec of the producer returns, so
// 2 x (math - launch) <= launch - producer, or the math warpgroups wait
// forever (a 232/48 split hangs).
// The math threads hold 128 O accumulators + 16 S + addressing; the fp8
// producer holds a whole next tile's half entry (codes, scales and rope: 82
// registers) across the conversion. 184/136 (2 x (184 - 168) = 168 - 136):
// no spills in the math warpgroups' tile loop (176 spills there), none in
// the dense producer and a few in the sparse one (120, the 192/120 split,
// spills twice as many). The bf16 producers need few registers. Chosen by
// ptxas -v.
inline constexpr int kLaunchRegs = 65536 / 384 / 8 * 8;  // 168
// The one-way form (kOneWay, decode_kernel.cuh) gives the math warpgroups
// different budgets: WG0 holds O's half, all of S (32) and P's fragments (16)
// for its register-A P.V; WG1 only O's half and addressing. fp8: 192/160,
// which leaves the producer 152 ((192 - 168) + (160 - 168) = 168 - 152).
template <bool kFp8, bool kOneWay = false>
struct Regs {
  static constexpr int kMath0 = kOneWay && kFp8 ? 192 : kFp8 ? 184 : 232;  // WG 0
  static constexpr int kMath1 = kOneWay && kFp8 ? 160 : kFp8 ? 184 : 232;  // WG 1
  static constexpr int kProducer = kOneWay && kFp8 ? 152 : kFp8 ? 136 : 40;
  static_assert((kMath0 - kLaunchRegs) + (kMath1 - kLaunchRegs) <= kLaunchRegs - kProducer,
                "the producer must free what the math warpgroups take");
};

// The narrow kernel, whose producer holds two tiles of raw entries
// (decode_kernel.cuh, kNarrow): its math warpgroups hold 64 O^T
// accumulators instead of 128 O ones and give registers back, the producer
// takes them (2 x (168 - 136) = 232 - 168; ptxas: no spills in the math
// warpgroups, a few in the fp8_e4m3 producer's cursor code).
struct NarrowRegs {
  static constexpr int kMath = 136;
  static constexpr int kProducer = 232;
  static_assert(kThreads / 128 == 3 && 2 * (kLaunchRegs - kMath) >= kProducer - kLaunchRegs,
                "the math warpgroups must free what the producer takes");
};

// Shared-memory map (bytes). Every tile starts 1024-aligned (the swizzle).
// Q 72 KB + 2 stages x 72 KB + P 8 KB = 224 KB of the 227 KB: no room for a
// third stage or a raw fp8 staging tile, hence the register dequantisation.
inline constexpr size_t kQOff = 0;
inline constexpr size_t kKvOff = kQOff + kTileBytes;
inline constexpr size_t kPOff = kKvOff + size_t(kStages) * kTileBytes;
inline constexpr size_t kMaxOff = kPOff + kBlockBytes;         // f32 [2 parity][2 wg][64]
inline constexpr size_t kLOff = kMaxOff + 2 * 2 * kM * 4;      // f32 [2 wg][64]
inline constexpr size_t kFlagOff = kLOff + 2 * kM * 4;         // i32 [kStages][4 producer warps]
inline constexpr size_t kBarOff = kFlagOff + kStages * 4 * 4;  // u64 full[kStages], empty[kStages]
// fp8 caches only (the f16 MMA path, decode_kernel.cuh): the per-row factor
// that undoes Q's power-of-two shift, and per stage the per-key factor
// 2^e_key with one flag word per producer warp (bit 0: a key of the warp has
// e_key > 0; bit 1: a key needed more than kKeyShiftMax). After the barriers:
// the bf16 kernels' map is unchanged.
inline constexpr size_t kQScaleOff = kBarOff + 2 * kStages * 8;              // f32 [64]
inline constexpr size_t kKeyFacOff = kQScaleOff + kM * 4;                    // f32 [kStages][64]
inline constexpr size_t kKeyFlagOff = kKeyFacOff + kStages * kTileKeys * 4;  // i32 [kStages][4]
// Narrow kernel only (decode_narrow.cuh): each math warpgroup's running max
// per query row and each math warp's `bad`, exchanged at the end of a piece.
inline constexpr size_t kNarrowMOff = kKeyFlagOff + kStages * 4 * 4;  // f32 [2 wg][16]
inline constexpr size_t kNarrowBadOff = kNarrowMOff + 2 * 16 * 4;     // i32 [8 warps]
// ... and each math warpgroup's own barrier (an mbarrier of its 128 threads,
// decode_narrow.cuh: narrow_wg_sync).
inline constexpr size_t kNarrowWgBarOff = kNarrowBadOff + 8 * 4;  // u64 [2 wg]
inline constexpr size_t kSmemBytes = kNarrowWgBarOff + 2 * 8;
// The one-way form has no max exchange; its 1 KB holds instead WG0's
// hand-over to WG1: per tile the rows' rescale factors, at a piece's end the
// row maxima and the bad flag (the row sums go to kLOff), and the two
// mbarriers of the P hand-over (p_ready: WG0 wrote P and the factors; p_free:
// WG1's P.V that read them completed).
inline constexpr size_t kAlphaOff = kMaxOff;          // f32 [64]
inline constexpr size_t kFinMaxOff = kMaxOff + 256;   // f32 [64]
inline constexpr size_t kFinBadOff = kMaxOff + 512;   // i32
inline constexpr size_t kHandBarOff = kMaxOff + 768;  // u64 p_ready, p_free
// ... and the piece hand-overs: q_ready (WG1 loaded the piece's Q), q_free
// (WG0's last read of the piece's Q), fin_ready (WG0 wrote the row totals),
// fin_free (WG1 read them).
inline constexpr size_t kPieceBarOff =
    kHandBarOff + 16;  // u64 q_ready, q_free, fin_ready, fin_free
static_assert(kPieceBarOff + 32 <= kLOff, "the hand-over fits the max buffer");
static_assert(kBarOff % 8 == 0 && kHandBarOff % 8 == 0 && kNarrowWgBarOff % 8 == 0,
              "mbarriers are 8-byte aligned");
static_assert(kSmemBytes <= 227 * 1024, "one CTA must fit the 227 KB a Hopper block may use");

// fp8 caches in f16: a key whose values exceed f16's range is stored as
// k * 2^-e_key and P's column is multiplied by 2^e_key before P.V; P <= 1, so
// P * 2^e_key stays below f16's 65504 for e_key <= 15. Keys that would need
// more (a block scale above 2^22 or |rope| >= 2^31) make the request's rows
// NaN instead of a wrong finite answer.
inline constexpr int kKeyShiftMax = 15;

// Named barriers (0 is __syncthreads): kBarQ, kBarMax, kBarP between the two
// math warpgroups; kBarQ1: WG1's threads loading Q (one-way form); kBarProd:
// the producer warpgroup's threads (TMA kernel).
inline constexpr int kBarQ = 1, kBarMax = 2, kBarP = 3, kBarQ1 = 7, kBarProd = 6;
// Narrow kernel: the end of a piece uses kBarQ, kBarMax, kBarP (the 64-row
// math's, free there) in turn, each for one hand-over, all plain bar.sync of
// the 256 math threads. A warpgroup's own meetings in its tiles are NOT named
// barriers but an mbarrier (kNarrowWgBarOff): the two warpgroups run
// different numbers of tiles, and compute-sanitizer's racecheck stops
// following the shared 256-thread barriers once the math warps have passed
// different sequences of named barriers (41-61 hazards in rounds C and E,
// all across the piece end's kBarQ / kBarMax;
// scripts/models/decode_narrow_barriers.py checks the rule).

// The narrow kernel (decode_narrow.cuh): row blocks with at most kNarrowRows
// query rows (h_q 16, s_q 1) computed transposed, S^T = K Q^T and
// O^T = V^T P^T (wgmma M = 64 keys or value dims, N = the 16 rows), so the
// tensor work and the shared-memory reads per tile are those of 16 rows, not
// of 64. fp8 caches only, dense (paged) keys.
inline constexpr int kNarrowRows = 16;
// The automatic choice for such row blocks (decode_cuda.cpp): measured on an
// H100 (2026-12-06) at b128 h16 s_q1 L16K / L32K, 1.19-1.21x the 64-row fp8
// kernel (docs/perf-log.md).
inline constexpr bool kChooseNarrow = true;

}  // namespace mla::cuda::decode
