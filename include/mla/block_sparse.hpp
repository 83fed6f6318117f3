// Block-sparse token selection (NSA, arXiv 2502.11089: the parameters seed 000
// calls "DSA parameters"). Our configurable alternative to the lightning
// indexer: it produces index lists for sparse_decode (mla/sparse.hpp).
//
// For query token i of request b, with n visible keys (the causal limit
// len - (s_q - 1 - i)):
//  1. Compressed keys: k_j = mean of the 576-dim latent entries of tokens
//     [j * stride, j * stride + block_size), for every j whose block is complete
//     (j * stride + block_size <= n). Mean pooling stands in for NSA's learned
//     MLP (we have no trained weights; the mean keeps the latent's scale).
//  2. Compressed scores: c_j = max over heads h of q~_h . k_j (softmax-free, no
//     scale: only the order matters). Max, not sum, over heads: one list serves
//     all heads (MQA), so a block any head needs must rank high; a raw-dot sum
//     would let heads of opposite sign cancel it out.
//  3. Selection blocks J = [J * selected_block_size, (J + 1) * selected_block_size)
//     (the last one clipped to n) score S_J = max c_j over the compressed blocks
//     that overlap J; a block that no complete compressed block overlaps has no
//     score and is chosen only when forced.
//  4. Chosen blocks: the first initial_blocks and the last local_blocks are
//     forced; the rest of num_selected_blocks (which counts the forced ones, as
//     in NSA) are the best scores, ties to the lower block.
//  5. The list is the union of the chosen blocks' tokens and the sliding window
//     [n - sliding_window, n), sorted ascending, as global cache slots
//     block_table[b][p / page_size] * page_size + p % page_size, padded with -1.
#pragma once
#include <cstdint>
#include <span>
#include <string_view>

#include "mla/kv_cache.hpp"
#include "mla/status.hpp"
#include "mla/tensor.hpp"

namespace mla {

struct BlockSparseParams {
  int32_t block_size = 32;           // tokens mean-pooled into one compressed key
  int32_t stride = 16;               // distance between compressed blocks (overlap if < block_size)
  int32_t selected_block_size = 64;  // tokens per selection block
  int32_t num_selected_blocks = 16;  // blocks chosen, initial and local included
  int32_t initial_blocks = 1;        // always chosen: the start of the prompt
  int32_t local_blocks = 2;          // always chosen: the newest blocks
  int32_t sliding_window = 512;      // newest tokens always attended
};

// Checks every field (positive sizes, forced blocks <= num_selected_blocks);
// the message names the field and its value.
Status validate_block_sparse_params(const BlockSparseParams& p);

// Entries an index list needs: num_selected_blocks * selected_block_size +
// sliding_window (the union's worst case), rounded up to a multiple of 64 (the
// granule the sparse kernels read lists in).
int64_t block_sparse_capacity(const BlockSparseParams& p);

struct BlockSparsePreset {
  const char* name;
  BlockSparseParams params;
  const char* source;  // where the numbers come from
};
std::span<const BlockSparsePreset> block_sparse_presets();
// Unknown name: Errc::invalid_value listing the known names.
Status block_sparse_preset(std::string_view name, BlockSparseParams* out);

//   q             [B, s_q, h_q, 576] bf16/f32 (f64 on CPU): absorbed queries q~
//   kv            paged cache (bf16 or fp8_ds_mla), block_table [B, max_pages] i32,
//   cache_seqlens [B] i32 (the s_q new tokens included)
//   indices       out [B, s_q, C] i32, C >= block_sparse_capacity(params)
//   num_selected  optional out [B, s_q] i32: valid entries at the head of each list
struct BlockSparseSelectArgs {
  TensorView q;
  KvCacheView kv;
  TensorView block_table;
  TensorView cache_seqlens;
  BlockSparseParams params;
  TensorView indices;
  TensorView num_selected;
};
Status block_sparse_select(const BlockSparseSelectArgs& args, const ExecContext& ctx = {});

}  // namespace mla
