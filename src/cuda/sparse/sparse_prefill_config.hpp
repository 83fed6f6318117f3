// Constants of the sparse prefill kernel (sparse_prefill_kernel.cuh) and the
// shared-memory plan they imply.
//
// One CTA serves 64 query rows: the heads [64 hb, 64 hb + 64) of one query
// token (h_q 16 and 32 fill 16 or 32 of the 64 rows; the rest are zero rows
// whose output is not written). Rows of different tokens cannot share a CTA:
// every token has its own key list. Padding costs 4x / 2x the tensor work at
// h_q 16 / 32, but a smaller wgmma M does not exist (M is always 64) and the
// gather, which is the same per token whatever h_q is, dominates there.
#pragma once

namespace mla::cuda::sparse {

struct SparsePrefillConfig {
  static constexpr int kRows = 64;  // query rows per CTA (wgmma M)
  static constexpr int kKeys = 64;  // keys per gathered tile
  static constexpr int kDqk = 576, kDv = 512;
  static constexpr int kCol = 64;  // bf16 columns of one 128-byte swizzle row
  static constexpr int kQkBlocks = kDqk / kCol, kVBlocks = kDv / kCol;
  static constexpr int kChunks = kDqk / 8;  // 16-byte pieces of one row
  static constexpr int kQBlockBytes = kRows * 128, kKBlockBytes = kKeys * 128;
  static constexpr int kSmemQ = kQBlockBytes * kQkBlocks;
  static constexpr int kSmemK = kKBlockBytes * kQkBlocks;
  static constexpr int kStages = 2;  // gathered key tiles in flight
  static constexpr int kSmemP = kRows * kKeys * 2;
  // Two math warpgroups: each computes S for half of a tile's keys and owns
  // half of the output columns; a producer warpgroup gathers.
  static constexpr int kMathWgs = 2;
  static constexpr int kMathThreads = kMathWgs * 128;
  static constexpr int kThreads = kMathThreads + 128;
  static constexpr int kKeysPerWg = kKeys / kMathWgs;  // S columns of one math warpgroup
  static constexpr int kVColsPerWg = kDv / kMathWgs;   // output columns of one math warpgroup
  // Row maxima (per tile) and row sums (per item, two sets by item parity) exchanged.
  static constexpr int kSmemRed = 3 * kMathWgs * kRows * 4;
  static constexpr int kBarriers = 2 * kStages + 2;  // full, empty per stage; q_full, q_empty
  static constexpr int kSmemBytes =
      1024 /* alignment slack */ + kSmemQ + kStages * kSmemK + kSmemP + kSmemRed + 8 * kBarriers;
  static constexpr int kProducerRegs = 72, kMathRegs = 216;
  // Producer: 8 threads per key row (each 9 pieces 128 B apart), 16 rows per pass.
  static constexpr int kThreadsPerKey = 8, kKeysPerPass = 128 / kThreadsPerKey;

  static_assert(kRows == 64, "wgmma M is 64: one warpgroup's accumulator rows");
  static_assert(kDqk % kCol == 0 && kDv % kCol == 0, "Q, K and V are whole SW128 blocks");
  static_assert(kKeysPerWg % 8 == 0 && kKeysPerWg == 32, "S of one warpgroup is one m64n32 tile");
  static_assert(kVColsPerWg == 256, "P.V of one warpgroup is one m64n256 tile");
  static_assert(kKeys * 2 == 128, "P (64 rows x 64 keys bf16) is exactly one SW128 block");
  static_assert(kThreadsPerKey * 9 == kChunks, "a producer thread copies 9 pieces of its key row");
  static_assert(kKeys % kKeysPerPass == 0, "whole producer passes per tile");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per CTA on Hopper is 227 KB");
  static_assert(kProducerRegs * 128 + kMathRegs * kMathThreads <= 65536,
                "setmaxnreg budgets must fit the register file");
};

}  // namespace mla::cuda::sparse
