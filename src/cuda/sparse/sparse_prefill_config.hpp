// Constants of the sparse prefill kernel (sparse_prefill_kernel.cuh) and the
// shared-memory plan they imply.
//
// One work item = 64 query rows: the heads [64 hb, 64 hb + 64) of one query
// token (h_q 16 and 32 fill 16 or 32 of the 64 rows; the rest are zero rows
// whose output is not written). Rows of different tokens cannot share an
// item: every token has its own key list. Padding costs 4x / 2x the tensor
// work at h_q 16 / 32, but a smaller wgmma M does not exist (M is always 64)
// and the gather, the same per token whatever h_q is, dominates there.
#pragma once

namespace mla::cuda::sparse {

struct SparsePrefillConfig {
  static constexpr int kRows = 64;  // query rows per item (wgmma M)
  static constexpr int kKeys = 64;  // keys per gathered tile
  static constexpr int kDqk = 576, kDv = 512;
  static constexpr int kCol = 64;  // bf16 columns of one 128-byte swizzle row
  static constexpr int kQkBlocks = kDqk / kCol, kVBlocks = kDv / kCol;
  static constexpr int kChunks = kDqk / 8;  // 16-byte pieces of one row
  static constexpr int kQBlockBytes = kRows * 128, kKBlockBytes = kKeys * 128;
  static constexpr int kSmemQ = kQBlockBytes * kQkBlocks;
  static constexpr int kSmemK = kKBlockBytes * kQkBlocks;
  // Two tile buffers: tiles 2i and 2i + 1 of an item (a "pair"). Each is
  // filled and released in two halves: L = blocks 0..3 (V columns 0..255),
  // R = blocks 4..8 (V columns 256..511 and the 64 rope columns).
  static constexpr int kBuffers = 2, kHalves = 2;
  static constexpr int kLBlocks = 4, kRBlocks = kQkBlocks - kLBlocks;
  // P of one tile (bf16, one SW128 block), handed between the warpgroups:
  // P0 then P1 of a pair in turn. It is the only block written by generic
  // stores; K and Q blocks are written only by cp.async (a block written by
  // both proxies needs an ordering that racecheck cannot follow).
  static constexpr int kRopeBlock = kQkBlocks - 1;
  static constexpr int kSmemP = kRows * kKeys * 2;
  // Two math warpgroups, each owning half of the output columns; a producer
  // warpgroup gathers.
  static constexpr int kMathWgs = 2;
  static constexpr int kMathThreads = kMathWgs * 128;
  static constexpr int kThreads = kMathThreads + 128;
  static constexpr int kVColsPerWg = kDv / kMathWgs;
  // Running max of a pair handed between the warpgroups, one slot per
  // direction (m0: 0 -> 1, m1: 1 -> 0); row sums per item (two sets by item
  // parity: each warpgroup writes its own before it waits for the other's).
  static constexpr int kSmemRed = 2 * kRows * 4 + 2 * kMathWgs * kRows * 4;
  // ready, free; q_full, q_empty; the math warpgroups' hand-overs (m0, m1, P0,
  // P1, row sums).
  static constexpr int kHandOvers = 5;
  static constexpr int kBarriers = 2 * kBuffers * kHalves + 2 + kHandOvers;
  static constexpr int kSmemBytes =
      1024 /* alignment slack */ + kSmemQ + kBuffers * kSmemK + kSmemP + kSmemRed + 8 * kBarriers;
  // setmaxnreg moves registers within what the CTA got at launch: 384 threads
  // x 168 (the compiler's count under __launch_bounds__(384, 1)) = 64512.
  static constexpr int kProducerRegs = 72, kMathRegs = 216;
  static constexpr int kLaunchRegs = 168;
  // The fp8 producer holds loaded codes, scales and rope pieces in registers
  // before it dequantises them: 16 more, taken from the math warpgroups.
  static constexpr int kProducerRegsFp8 = 88, kMathRegsFp8 = 208;
  // Producer: 8 threads per key row (a 128-byte row of every block), 16 rows per pass.
  static constexpr int kThreadsPerKey = 8, kKeysPerPass = 128 / kThreadsPerKey;
  static constexpr int kPasses = kKeys / kKeysPerPass;

  static_assert(kRows == 64, "wgmma M is 64: one warpgroup's accumulator rows");
  static_assert(kKeys == 64, "S of one tile is one m64n64 product; P one SW128 block");
  static_assert(kDqk % kCol == 0 && kDv % kCol == 0, "Q, K and V are whole SW128 blocks");
  static_assert(kLBlocks * kCol == kVColsPerWg && kRBlocks == kVBlocks - kLBlocks + 1,
                "half L is warpgroup 0's V columns; half R warpgroup 1's plus the rope block");
  static_assert(kRopeBlock * kCol == kDv, "the rope block is not read by P.V");
  static_assert(kVColsPerWg == 256, "P.V of one warpgroup is one m64n256 tile");
  static_assert(kThreadsPerKey * 8 == kCol, "a producer thread copies one 16-byte piece per block");
  static_assert(kKeys % kKeysPerPass == 0, "whole producer passes per tile");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per CTA on Hopper is 227 KB");
  static_assert(kProducerRegs * 128 + kMathRegs * kMathThreads <= kLaunchRegs * kThreads &&
                    kProducerRegsFp8 * 128 + kMathRegsFp8 * kMathThreads <= kLaunchRegs * kThreads,
                "setmaxnreg.inc waits forever for registers the CTA was not given at launch");
};

}  // namespace mla::cuda::sparse
