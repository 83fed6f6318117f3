// Head split vs batch split of decode attention: partitions and byte counts.
#include "mla/attn_split.hpp"

#include <algorithm>

#include "common/validate.hpp"

namespace mla::parallel {
namespace {

using detail::error;

Status check_rank(int world_size, int rank) {
  if (world_size < 1) return error(Errc::out_of_range, "world_size = {} must be >= 1", world_size);
  if (rank < 0 || rank >= world_size)
    return error(Errc::out_of_range, "rank = {} is outside [0, world_size = {})", rank, world_size);
  return Status::Ok();
}

Status check_shape(const AttnSplitShape& s, bool with_batch) {
  if (s.world_size < 1)
    return error(Errc::out_of_range, "world_size = {} must be >= 1", s.world_size);
  if (s.num_heads < 1) return error(Errc::out_of_range, "num_heads = {} must be >= 1", s.num_heads);
  if (s.num_heads % s.world_size != 0)
    return error(Errc::invalid_value, "num_heads = {} is not a multiple of world_size = {}",
                 s.num_heads, s.world_size);
  if (with_batch && s.batch < 0)
    return error(Errc::out_of_range, "batch = {} must be >= 0", s.batch);
  if (s.context < 0) return error(Errc::out_of_range, "context = {} must be >= 0", s.context);
  if (s.page_size < 1) return error(Errc::out_of_range, "page_size = {} must be >= 1", s.page_size);
  if (s.layers < 1) return error(Errc::out_of_range, "layers = {} must be >= 1", s.layers);
  if (s.hidden < 1) return error(Errc::out_of_range, "hidden = {} must be >= 1", s.hidden);
  if (s.format != KvFormat::bf16 && s.format != KvFormat::fp8_ds_mla &&
      s.format != KvFormat::fp8_e4m3)
    return error(Errc::invalid_value, "format = {} is not a KvFormat", int(s.format));
  return Status::Ok();
}

// Cache bytes of one request over every layer, whole pages. Contexts past
// 2^40 tokens are rejected before this can overflow int64.
int64_t request_kv_bytes(const AttnSplitShape& s) {
  const int64_t pages = (s.context + s.page_size - 1) / s.page_size;
  return pages * s.page_size * kv_entry_bytes(s.format) * s.layers;
}

}  // namespace

const char* attn_split_name(AttnSplit s) noexcept {
  switch (s) {
    case AttnSplit::heads: return "heads";
    case AttnSplit::batch: return "batch";
  }
  return "?";
}

Status split_heads(int num_heads, int world_size, int rank, RankSlice* out) {
  if (out == nullptr) return error(Errc::invalid_value, "out: output pointer is null");
  MLA_TRY(check_rank(world_size, rank));
  if (num_heads < 1) return error(Errc::out_of_range, "num_heads = {} must be >= 1", num_heads);
  if (num_heads % world_size != 0)
    return error(Errc::invalid_value, "num_heads = {} is not a multiple of world_size = {}",
                 num_heads, world_size);
  const int per = num_heads / world_size;
  *out = {int64_t(rank) * per, per};
  return Status::Ok();
}

Status split_requests(int64_t batch, int world_size, int rank, RankSlice* out) {
  if (out == nullptr) return error(Errc::invalid_value, "out: output pointer is null");
  MLA_TRY(check_rank(world_size, rank));
  if (batch < 0) return error(Errc::out_of_range, "batch = {} must be >= 0", batch);
  const int64_t base = batch / world_size, extra = batch % world_size;
  *out = {rank * base + std::min<int64_t>(rank, extra), base + (rank < extra ? 1 : 0)};
  return Status::Ok();
}

Status attn_split_cost(const AttnSplitShape& s, AttnSplit split, AttnSplitCost* out) {
  if (out == nullptr) return error(Errc::invalid_value, "out: output pointer is null");
  MLA_TRY(check_shape(s, true));
  if (s.context > (int64_t{1} << 40) || s.batch > (int64_t{1} << 20))
    return error(Errc::out_of_range, "context = {}, batch = {}: past 2^40 tokens or 2^20 requests",
                 s.context, s.batch);
  AttnSplitCost c;
  c.kv_bytes_per_request = request_kv_bytes(s);
  const int64_t w = s.world_size;
  if (split == AttnSplit::heads) {
    c.heads_per_gpu = s.num_heads / w;
    c.requests_per_gpu = s.batch;  // one latent KV head: every rank reads every key
    c.allreduce_payload_bytes = w > 1 ? s.batch * s.hidden * 2 : 0;
    c.allreduce_wire_bytes = 2 * (w - 1) * (s.batch * s.hidden * 2) / w;
    c.allgather_wire_bytes = (w - 1) * (s.batch * s.num_heads * kDc * 2) / w;
  } else if (split == AttnSplit::batch) {
    RankSlice first;
    MLA_TRY(split_requests(s.batch, s.world_size, 0, &first));  // rank 0 is the most loaded
    c.heads_per_gpu = s.num_heads;
    c.requests_per_gpu = first.count;
  } else {
    return error(Errc::invalid_value, "split = {} is not an AttnSplit", int(split));
  }
  c.kv_bytes_per_gpu = c.requests_per_gpu * c.kv_bytes_per_request;
  c.kv_bytes_read_per_layer = c.requests_per_gpu * s.context * kv_entry_bytes(s.format);
  *out = c;
  return Status::Ok();
}

Status attn_split_capacity(const AttnSplitShape& s, AttnSplit split, int64_t kv_budget_bytes,
                           AttnSplitCapacity* out) {
  if (out == nullptr) return error(Errc::invalid_value, "out: output pointer is null");
  MLA_TRY(check_shape(s, false));
  if (kv_budget_bytes < 0)
    return error(Errc::out_of_range, "kv_budget_bytes = {} must be >= 0", kv_budget_bytes);
  if (s.context < 1)
    return error(Errc::out_of_range, "context = {}: capacity needs at least one token per request",
                 s.context);
  if (s.context > (int64_t{1} << 40))
    return error(Errc::out_of_range, "context = {} is past 2^40 tokens", s.context);
  AttnSplitCapacity c;
  c.requests_per_gpu = kv_budget_bytes / request_kv_bytes(s);
  if (split == AttnSplit::heads)
    c.total_batch = c.requests_per_gpu;
  else if (split == AttnSplit::batch)
    c.total_batch = c.requests_per_gpu * s.world_size;
  else
    return error(Errc::invalid_value, "split = {} is not an AttnSplit", int(split));
  *out = c;
  return Status::Ok();
}

}  // namespace mla::parallel
