// The split-KV schedule shared by dense decode and sparse decode: what the
// scheduler kernel writes into the workspace and the main kernel and the
// combine kernel read. A request's keys are cut into "pieces" (request, tile
// range); each persistent worker runs a contiguous run of pieces of equal
// cost; pieces of split requests write fp32 partials that the combine merges
// by log-sum-exp.
#pragma once
#include <cstddef>
#include <cstdint>

namespace mla::cuda::split {

inline constexpr int kTileKeys = 64;  // keys per tile: the schedule's unit of work

// Cost model of the balanced scheduler, in tile units: a piece costs its tiles
// plus kPieceOverheadTiles (loading Q, the epilogue's partial write, the
// combine's read), so short requests are not split finer than that pays.
inline constexpr int kPieceOverheadTiles = 2;
// Batch-invariant split: a request of T tiles is cut into
// n = min(ceil(T / kInvariantChunkTiles), kInvariantMaxSplits) equal pieces,
// a function of its own length only.
inline constexpr int kInvariantChunkTiles = 8;
inline constexpr int kInvariantMaxSplits = 16;

// Piece.slot values other than a partial slot index (>= 0).
inline constexpr int kSlotDirect = -1;      // the only piece of its request: write out/lse directly
inline constexpr int kSlotBadRequest = -2;  // cache_seqlens[b] < 0 or > capacity: NaN rows

struct Piece {
  int32_t b;           // request
  int32_t tile_begin;  // tiles [tile_begin, tile_end) of the request's keys
  int32_t tile_end;
  int32_t slot;  // partial slot, or kSlotDirect / kSlotBadRequest
};
static_assert(sizeof(Piece) == 16, "Piece is one 16-byte load");

struct RequestSplit {
  int32_t num_pieces;  // 1: written directly by the main kernel, no combine
  int32_t slot_base;   // first partial slot of the request (when num_pieces > 1)
};

// Byte offsets of the workspace regions (all kWorkspaceAlign-aligned). The
// schedule (pieces .. token_len) comes first, in [0, plan_bytes): a plan
// (mla/decode.hpp DecodePlan) is that prefix, written once per step and read by
// every later call with the same lengths; the partials after it are per-call
// scratch. Nothing in the prefix is an address, so its bytes may be copied to
// another buffer (a CUDA-graph buffer) and stay valid there.
inline constexpr size_t kWorkspaceAlign = 256;
struct WorkspaceLayout {
  int64_t max_pieces = 0;   // upper bound of the pieces the scheduler may emit
  int64_t max_slots = 0;    // upper bound of the partial slots
  size_t pieces = 0;        // Piece[max_pieces]
  size_t piece_pos = 0;     // int64[max_pieces]: cost position where each piece starts
  size_t req_pos = 0;       // int64[B]: scratch of the scheduler
  size_t req_split = 0;     // RequestSplit[B]
  size_t worker_begin = 0;  // int32[P + 1]: worker w runs pieces [begin[w], begin[w+1])
  size_t token_len = 0;     // int32[B]: per-request key counts (key source Indexed only)
  size_t plan_bytes = 0;    // end of the schedule regions above
  size_t partial_lse = 0;   // f32[max_slots * rows]
  size_t partial_out = 0;   // f32[max_slots * rows * 512]
  size_t total = 0;
};

}  // namespace mla::cuda::split
