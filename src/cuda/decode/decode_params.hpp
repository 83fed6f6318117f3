// The POD parameter block of the CUDA decode kernels (absorbed MLA, MQA form:
// one 576-wide key per token, its first 512 dims the value), read by the
// split scheduler, the main kernel and the combine. Dense decode (key source
// Paged) and sparse decode (key source Indexed, decode_keys.cuh) fill it.
//
// Work decomposition:
//  * rows: a CTA owns 64 query rows of one request; a request has
//    rows = s_q * h_q (row r is new token r / h_q, head r % h_q, which is q's
//    own memory order [s_q, h_q]); R = ceil(rows / 64) row blocks run as
//    blockIdx.y, so the R CTAs that read the same keys run side by side and
//    share them through L2 (HBM sees each cache entry about once).
//  * keys: tiles of 64 tokens; one 576-wide load of a token serves K (all
//    576) and V (its first 512).
//  * split-KV: split/split_params.hpp.
#pragma once
#include <cstddef>
#include <cstdint>

#include "cuda/decode/split/split_params.hpp"
#include "mla/dims.hpp"

namespace mla::cuda::decode {

using ::mla::kDqk;
using ::mla::kDv;
using split::kSlotBadRequest;
using split::Piece;
using split::RequestSplit;
using split::WorkspaceLayout;
inline constexpr int kTileKeys = split::kTileKeys;
inline constexpr int kChunksPerRow = kDqk * 2 / 16;  // 72 16-byte chunks per bf16 row

// Everything the three kernels read; built once per call on the host.
struct DecodeParams {
  // q [B, s_q, h_q, 576] bf16 (element strides)
  const void* q;
  int64_t q_stride_b, q_stride_s, q_stride_h;
  // cache: bytes of one page and of one token (the entry dims are dense)
  const uint8_t* kv;
  int64_t page_stride_bytes, token_stride_bytes;
  int32_t num_pages, page_size;
  // fp8_e4m3 cache: its per-tensor scale d_k (one f32 on the device, k =
  // code * d_k), read by the kernel; null for the other formats.
  const float* k_scale;
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
