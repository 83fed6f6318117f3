// Decode attention over several GPUs, the two ways of dividing it
// (docs/multi-gpu.md section 4): host arithmetic only, so CI tests it.
//   heads: tensor-parallel attention. Rank r runs heads [h0, h0 + H / world)
//          of every request; MLA has one latent KV head, so every rank holds
//          the whole cache of every request. The W_UV + o_proj partial
//          products of the rank's heads are summed by an all-reduce of the
//          [B, hidden] bf16 output.
//   batch: data-parallel attention. Rank r runs all heads of its requests and
//          holds only their caches; nothing is exchanged inside attention.
#pragma once
#include <cstdint>

#include "mla/kv_cache.hpp"
#include "mla/status.hpp"

namespace mla::parallel {

enum class AttnSplit : int32_t { heads = 0, batch = 1 };
const char* attn_split_name(AttnSplit s) noexcept;

// A contiguous range [begin, begin + count) of heads or requests.
struct RankSlice {
  int64_t begin = 0;
  int64_t count = 0;
};

// Heads of `rank`: equal contiguous slices. num_heads must be a multiple of
// world_size: every rank then holds W_UK/W_UV/o_proj slices of one shape, and
// the decode kernel sees one h_q on every rank.
Status split_heads(int num_heads, int world_size, int rank, RankSlice* out);

// Requests of `rank`: contiguous, sizes differ by at most one (the first
// batch % world_size ranks take one more). A rank may get none (batch < world).
Status split_requests(int64_t batch, int world_size, int rank, RankSlice* out);

// One decode step of `batch` requests, each with `context` tokens in the cache.
struct AttnSplitShape {
  int world_size = 2;
  int num_heads = 128;
  int64_t batch = 64;
  int64_t context = 4096;
  KvFormat format = KvFormat::bf16;
  int64_t page_size = 64;
  int layers = 61;    // DeepSeek-V3: cache bytes count every layer
  int hidden = 7168;  // the all-reduced output row [B, hidden] bf16
};

// What the most loaded GPU holds and sends, for one split.
struct AttnSplitCost {
  int64_t heads_per_gpu = 0;
  int64_t requests_per_gpu = 0;         // requests whose cache the GPU holds and reads
  int64_t kv_bytes_per_request = 0;     // every layer, rounded up to whole pages
  int64_t kv_bytes_per_gpu = 0;         // every layer
  int64_t kv_bytes_read_per_layer = 0;  // one decode step of one layer
  // Per layer, per GPU: the all-reduce payload [B, hidden] bf16 (0 for batch
  // split, and for world_size 1), and the bytes a ring all-reduce sends from
  // each GPU: 2 (w - 1) / w of the payload.
  int64_t allreduce_payload_bytes = 0;
  int64_t allreduce_wire_bytes = 0;
  // The alternative not taken: all-gather of the attention outputs
  // [B, H / w, 512] bf16, (w - 1) / w of [B, H, 512] sent per GPU: H * 512 /
  // (2 * hidden) = 4.6x the all-reduce's bytes for V3, and every rank would
  // then need all of W_UV and o_proj and repeat the whole projection.
  int64_t allgather_wire_bytes = 0;
};
Status attn_split_cost(const AttnSplitShape& shape, AttnSplit split, AttnSplitCost* out);

// The largest batch when each GPU gives kv_budget_bytes to the cache (shape.batch
// is not read): requests_per_gpu caches fit on a GPU under either split; the
// group serves that many with head split (each GPU holds every request) and
// world_size times that with batch split.
struct AttnSplitCapacity {
  int64_t requests_per_gpu = 0;
  int64_t total_batch = 0;
};
Status attn_split_capacity(const AttnSplitShape& shape, AttnSplit split, int64_t kv_budget_bytes,
                           AttnSplitCapacity* out);

}  // namespace mla::parallel
