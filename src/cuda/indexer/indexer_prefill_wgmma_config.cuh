// The constants and the work split of the TMA + wgmma prefill indexer kernel
// (indexer_prefill_wgmma.cu, Kernel::flat_tma_wgmma): the CTA's shape, its
// shared-memory layout, its barriers, and the grid (token blocks x key chunks).
#pragma once
#include <algorithm>
#include <cstdint>

#include "cuda/common/cuda_status.hpp"
#include "cuda/indexer/indexer_params.hpp"

namespace mla::cuda::indexer::prefill_wgmma {

// A CTA: one producer warpgroup (one thread issues the TMA copies) and two
// consumer warpgroups, each owning 4 query tokens: D[64 keys x 256] =
// K[64 x 128] . Q[4 tokens x 64 heads, 128]^T, one m64n256k32 wgmma per k32
// step. Both consumers read every key tile of the CTA (one read of each key per
// 8 tokens), and take turns on the tensor cores (see the kernel).
constexpr int kConsumers = 2;
constexpr int kTokensPerWg = 4;                            // 4 x 64 heads = n256
constexpr int kTokens = kConsumers * kTokensPerWg;         // 8 tokens per CTA
constexpr int kThreads = (1 + kConsumers) * 128;           // 384
constexpr int kTileKeys = 64;                              // the wgmma's m64: one key per row
constexpr int kTileBytes = kTileKeys * kIndexerDim;        // 8192: 8 SW128 atoms
constexpr int kQueryBytes = kIndexerHeads * kIndexerDim;   // 8192 per token
constexpr int kWgQueryBytes = kTokensPerWg * kQueryBytes;  // 32768: the n256 B operand
constexpr int kStages = 8;                                 // key tiles in flight
constexpr int kProducerRegs = 40, kConsumerRegs = 232;     // 128 x 40 + 256 x 232 <= 64K
static_assert(kIndexerHeads == 64 && kIndexerDim == 128,
              "a token's heads are 64 rows of the n256 B operand; a key is one 128-byte SW128 row");
static_assert(128 * kProducerRegs + kConsumers * 128 * kConsumerRegs <= 65536,
              "setmaxnreg budgets fit the register file");

// Named barriers (0 is __syncthreads): a consumer's weights are in place
// (kBarWeights + c, 128 threads); consumer c's turn to issue its MMAs
// (kBarTurn + c, 256 threads: c syncs, the other consumer arrives); the
// candidate sink's per-tile exchange of its warps' counts (kBarCand + c, 128
// threads; indexer_prefill_candidates.cuh).
constexpr int kBarWeights = 1;
constexpr int kBarTurn = 3;
constexpr int kBarCand = 5;

// Shared memory: the 8 tokens' queries (SW128, as TMA writes them), the ring of
// key tiles, the weights [8][64] f32, the mbarriers, then the sink's bytes
// (16-byte aligned; none for the logits sink).
struct Smem {
  static constexpr int kQueryOff = 0;
  static constexpr int kStageOff = kTokens * kQueryBytes;
  static constexpr int kWeightOff = kStageOff + kStages * kTileBytes;
  static constexpr int kBarOff = kWeightOff + kTokens * kIndexerHeads * 4;
  // full[kStages], empty[kStages], q_full
  static constexpr int kBytes = kBarOff + (2 * kStages + 1) * 8;
  static constexpr int kSinkOff = (kBytes + 15) / 16 * 16;
  // The dynamic allocation with a sink's bytes: room to align the base to 1024.
  static constexpr int alloc(int sink_bytes) { return kSinkOff + sink_bytes + 1024; }
  static_assert(kStageOff % 1024 == 0 && kTileBytes % 1024 == 0,
                "TMA's 128-byte swizzle needs 1024-byte aligned tiles");
};
static_assert(Smem::alloc(0) <= 227 * 1024, "one CTA per SM");

// Each tile's empty barrier: one arrival per consumer warp once its MMAs on
// the tile completed.
constexpr int kEmptyArrivals = kConsumers * 4;

// The grid: x = blocks of kTokens tokens, y = chunks of the key columns (a
// multiple of the tile), enough CTAs for two waves at one CTA per SM, chunks
// of at least 2048 keys (the queries' 64 KB load per CTA is then < 1/4 of its
// key reads); `keys_per_cta` > 0 (tests) sets the chunk instead.
struct Grid {
  int64_t blocks = 0, splits = 0, chunk = 0;
};
inline Status grid_for(const IndexerLogitsParams& p, int64_t keys_per_cta, Grid* g) {
  g->blocks = (p.num_tokens + kTokens - 1) / kTokens;
  if (keys_per_cta < 0)
    return value_error(Errc::invalid_value, "indexer logits prefill: keys_per_cta", keys_per_cta,
                       "is negative");
  int64_t chunk = keys_per_cta;
  if (chunk == 0) {
    const int64_t want = int64_t(current_sm_count()) * 2;
    const int64_t splits = std::max<int64_t>(1, (want + g->blocks - 1) / g->blocks);
    chunk = std::max<int64_t>(2048, (p.width + splits - 1) / splits);
  }
  g->chunk = (chunk + kTileKeys - 1) / kTileKeys * kTileKeys;
  g->splits = (p.width + g->chunk - 1) / g->chunk;
  if (g->splits > 65535)
    return value_error(Errc::invalid_value, "indexer logits prefill: width", p.width,
                       "needs more than 65535 key chunks");
  if (g->blocks > INT32_MAX)
    return value_error(Errc::invalid_value, "indexer logits prefill: tokens", p.num_tokens,
                       "is too many");
  return Status::Ok();
}

}  // namespace mla::cuda::indexer::prefill_wgmma
