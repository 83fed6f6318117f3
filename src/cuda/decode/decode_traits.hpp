// Compile-time shape of the CUDA dense decode (absorbed MLA, MQA form) and the
// POD parameter blocks shared by the host launcher and the kernels.
//
// Work decomposition (see docs/perf-log.md for the measured consequences):
//  * rows: a CTA owns M = 16 * kRowTiles query rows of one request; a request
//    has rows = s_q * h_q (row r is new token r / h_q, head r % h_q, which is
//    q's own memory order [s_q, h_q]); R = ceil(rows / M) row blocks run as
//    blockIdx.y, so the R CTAs that read the same keys run side by side and
//    share them through L2 (HBM sees each cache entry about once).
//  * keys: tiles of kTileKeys tokens; one 576-wide load of a token serves K
//    (all 576) and V (its first 512).
//  * split-KV: a scheduler kernel turns cache_seqlens (device memory) into
//    "pieces" (request, tile range) and gives each of P persistent workers a
//    contiguous run of pieces of equal cost; pieces of split requests write
//    fp32 partials that a combine kernel merges by log-sum-exp.
#pragma once
#include <cstddef>
#include <cstdint>

namespace mla::cuda::decode {

inline constexpr int kTileKeys = 64;  // keys per tile: 64 rows of K/V in shared memory
inline constexpr int kDqk = 576;      // q/k width (c_kv 512 ; k_rope 64)
inline constexpr int kDv = 512;       // value width (= c_kv)
inline constexpr int kThreads = 256;  // 8 warps
inline constexpr int kWarps = kThreads / 32;
inline constexpr int kBf16EntryBytes = 2 * kDqk;  // 1152
inline constexpr int kFp8EntryBytes = 656;
inline constexpr int kChunksPerRow = kDqk * 2 / 16;  // 72 16-byte chunks per bf16 row

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

// Byte offsets of the workspace regions (all 256-byte aligned).
struct WorkspaceLayout {
  int64_t max_pieces = 0;   // upper bound of the pieces the scheduler may emit
  int64_t max_slots = 0;    // upper bound of the partial slots
  size_t pieces = 0;        // Piece[max_pieces]
  size_t piece_pos = 0;     // int64[max_pieces]: cost position where each piece starts
  size_t req_pos = 0;       // int64[B]: scratch of the scheduler
  size_t req_split = 0;     // RequestSplit[B]
  size_t worker_begin = 0;  // int32[P + 1]: worker w runs pieces [begin[w], begin[w+1])
  size_t partial_lse = 0;   // f32[max_slots * rows]
  size_t partial_out = 0;   // f32[max_slots * rows * 512]
  size_t token_len = 0;     // int32[B]: per-request key counts (key source Indexed only)
  size_t total = 0;
};

// Everything the three kernels read; built once per call on the host.
struct DecodeParams {
  // q [B, s_q, h_q, 576] bf16 (element strides)
  const void* q;
  int64_t q_stride_b, q_stride_s, q_stride_h;
  // cache: bytes of one page and of one token (the entry dims are dense)
  const uint8_t* kv;
  int64_t page_stride_bytes, token_stride_bytes;
  int32_t num_pages, page_size;
  // block_table [B, max_pages] i32
  const int32_t* block_table;
  int64_t bt_stride_b, bt_stride_p;
  int32_t max_pages;
  const int32_t* seqlens;  // [B] (element stride seqlens_stride)
  int64_t seqlens_stride;
  // out [B, s_q, h_q, 512] bf16 or f32; lse [B, h_q, s_q] f32
  void* out;
  bool out_f32;
  int64_t out_stride_b, out_stride_s, out_stride_h;
  float* lse;
  int64_t lse_stride_b, lse_stride_h, lse_stride_s;

  int32_t B, s_q, h_q, rows;  // rows = s_q * h_q
  bool causal;
  float scale_log2;  // softmax_scale * log2(e)

  // schedule (workspace)
  int32_t num_workers;  // P
  bool batch_invariant;
  int64_t max_pieces;
  Piece* pieces;
  int64_t* piece_pos;
  int64_t* req_pos;
  RequestSplit* req_split;
  int32_t* worker_begin;
  float* partial_lse;  // [slot][rows]
  float* partial_out;  // [slot][rows][512]

  // ---- key source Indexed (sparse decode on this kernel; decode_keys.cuh) ----
  // Zero / null for dense (Paged) decode. Request b is query token
  // (b / tokens_per_batch, b % tokens_per_batch) of q/out/lse/indices (their
  // stride_b / stride_s), with s_q = 1 per request and no causal mask; its key
  // j is the cache slot indices[..][j] (page = slot / page_size); a slot
  // outside [0, num_slots) (-1 padding) is never read: zero row, score -inf.
  int32_t tokens_per_batch;  // 0: Paged; > 0: Indexed (the API's s_q)
  const int32_t* indices;    // list of request b at indices + b * idx_stride_token
  int64_t idx_stride_token;  // [B, s_q, topk] flattened over (B, s_q) (host-checked)
  int64_t num_slots;
  // The scheduler first writes token_len[b] = clamp(topk_length ? topk_length[b /
  // tokens_per_batch] : topk, 0, topk); seqlens then points at token_len.
  const int32_t* topk_length;
  int32_t topk;
  int32_t* token_len;
};

}  // namespace mla::cuda::decode
