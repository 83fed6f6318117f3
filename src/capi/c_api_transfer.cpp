// C ABI of the host-side KV transfer plans (mla/transfer.hpp): the request in,
// the plan's runs and layer groups out (arrays written like text: the full
// count always, at most `capacity` entries), and the memcpy executor. The NCCL
// executor is in the optional libmla_transfer_nccl and stays out of this ABI.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "capi/capi_common.hpp"
#include "mla/transfer.hpp"

using namespace mla;
using namespace mla::capi;

static_assert(MLA_TRANSFER_LATENT == int(TransferCache::latent) &&
                  MLA_TRANSFER_INDEXER == int(TransferCache::indexer),
              "MLA_TRANSFER_LATENT/INDEXER must equal mla::TransferCache values");
static_assert(MLA_TRANSFER_BY_LAYER == int(TransferOrder::by_layer) &&
                  MLA_TRANSFER_WHOLE == int(TransferOrder::whole),
              "MLA_TRANSFER_BY_LAYER/WHOLE must equal mla::TransferOrder values");

namespace {

// A caller's array of `capacity` entries: NULL only when capacity is 0.
Status expect_array(const void* p, size_t capacity, const char* name, const char* capacity_name) {
  if (p == nullptr && capacity > 0)
    return Status(Errc::invalid_value,
                  fmt::format("{} is NULL but {} = {}", name, capacity_name, capacity));
  return Status::Ok();
}

Status to_side(const mla_transfer_side& c, const char* name, TransferSide* out) {
  if (c.num_page_ids < 0)
    return Status(Errc::invalid_value,
                  fmt::format("{}.num_page_ids = {} is negative", name, c.num_page_ids));
  if (c.pages == nullptr && c.num_page_ids > 0)
    return Status(Errc::invalid_value,
                  fmt::format("{}.pages is NULL but num_page_ids = {}", name, c.num_page_ids));
  out->pages = std::span<const int32_t>(c.pages, static_cast<size_t>(c.num_page_ids));
  out->num_pages = c.num_pages;
  out->page_size = c.page_size;
  out->page_stride = c.page_stride;
  out->layer_stride = c.layer_stride;
  return Status::Ok();
}

Status to_request(const mla_transfer_request& c, TransferRequest* r) {
  r->first_token = c.first_token;
  r->num_tokens = c.num_tokens;
  r->num_layers = c.num_layers;
  MLA_TRY(to_kv_format(c.src_format, "src_format", &r->src_format));
  MLA_TRY(to_kv_format(c.dst_format, "dst_format", &r->dst_format));
  if (c.with_indexer != 0 && c.with_indexer != 1)
    return Status(Errc::invalid_value,
                  fmt::format("with_indexer = {} is neither 0 nor 1", c.with_indexer));
  r->with_indexer = c.with_indexer == 1;
  if (c.order != MLA_TRANSFER_BY_LAYER && c.order != MLA_TRANSFER_WHOLE)
    return Status(Errc::invalid_value,
                  fmt::format("order = {} is neither MLA_TRANSFER_BY_LAYER ({}) nor "
                              "MLA_TRANSFER_WHOLE ({})",
                              c.order, int(MLA_TRANSFER_BY_LAYER), int(MLA_TRANSFER_WHOLE)));
  r->order = TransferOrder(c.order);
  MLA_TRY(to_side(c.src_latent, "src_latent", &r->src_latent));
  MLA_TRY(to_side(c.dst_latent, "dst_latent", &r->dst_latent));
  if (r->with_indexer) {
    MLA_TRY(to_side(c.src_indexer, "src_indexer", &r->src_indexer));
    MLA_TRY(to_side(c.dst_indexer, "dst_indexer", &r->dst_indexer));
  }
  return Status::Ok();
}

mla_copy_run to_c(const CopyRun& r) {
  return mla_copy_run{r.src_offset, r.dst_offset, r.bytes, r.layer, int32_t(r.cache)};
}

Status from_c(const mla_copy_run& c, size_t i, CopyRun* out) {
  if (c.cache != MLA_TRANSFER_LATENT && c.cache != MLA_TRANSFER_INDEXER)
    return Status(Errc::invalid_value,
                  fmt::format("runs[{}].cache = {} is neither MLA_TRANSFER_LATENT ({}) nor "
                              "MLA_TRANSFER_INDEXER ({})",
                              i, c.cache, int(MLA_TRANSFER_LATENT), int(MLA_TRANSFER_INDEXER)));
  if (c.src_offset < 0 || c.dst_offset < 0 || c.bytes < 0)
    return Status(Errc::out_of_range,
                  fmt::format("runs[{}]: src_offset = {}, dst_offset = {}, bytes = {}: none may "
                              "be negative",
                              i, c.src_offset, c.dst_offset, c.bytes));
  *out = CopyRun{c.src_offset, c.dst_offset, c.bytes, c.layer, TransferCache(c.cache)};
  return Status::Ok();
}

Status to_buffers(const mla_transfer_buffers* c, const char* name, TransferBuffers* out) {
  MLA_TRY(expect_pointer(c, name));
  for (auto [p, n, what] : {std::tuple{c->latent, c->num_latent, "latent"},
                            std::tuple{c->indexer, c->num_indexer, "indexer"}}) {
    if (n < 0)
      return Status(Errc::invalid_value, fmt::format("{}.num_{} = {} is negative", name, what, n));
    if (p == nullptr && n > 0)
      return Status(Errc::invalid_value,
                    fmt::format("{}.{} is NULL but num_{} = {}", name, what, what, n));
  }
  out->latent = std::span<void* const>(c->latent, static_cast<size_t>(c->num_latent));
  out->indexer = std::span<void* const>(c->indexer, static_cast<size_t>(c->num_indexer));
  return Status::Ok();
}

Status to_launch_info(const mla_launch_info* c, LaunchInfo* out) {
  MLA_TRY(expect_pointer(c, "who"));
  const size_t n = strnlen(c->master_addr, MLA_MASTER_ADDR_MAX);
  if (n == MLA_MASTER_ADDR_MAX)
    return Status(Errc::invalid_value,
                  fmt::format("who.master_addr is not NUL-terminated within {} bytes",
                              int(MLA_MASTER_ADDR_MAX)));
  *out = LaunchInfo{c->rank, c->world_size, c->local_rank, std::string(c->master_addr, n),
                    c->master_port};
  return Status::Ok();
}

}  // namespace

extern "C" {

const char* mla_transfer_cache_name(int32_t cache) {
  if (cache != MLA_TRANSFER_LATENT && cache != MLA_TRANSFER_INDEXER) return "?";
  return transfer_cache_name(TransferCache(cache));
}

int32_t mla_plan_transfer(const mla_transfer_request* request, mla_copy_run* runs,
                          size_t runs_capacity, int64_t* layer_begin, size_t layer_begin_capacity,
                          mla_transfer_plan_info* info) {
  return guarded([&] {
    MLA_TRY(expect_pointer(request, "request"));
    MLA_TRY(expect_pointer(info, "info"));
    MLA_TRY(expect_array(runs, runs_capacity, "runs", "runs_capacity"));
    MLA_TRY(expect_array(layer_begin, layer_begin_capacity, "layer_begin", "layer_begin_capacity"));
    TransferRequest r;
    MLA_TRY(to_request(*request, &r));
    TransferPlan p;
    MLA_TRY(plan_transfer(r, &p));
    for (size_t i = 0; i < std::min(p.runs.size(), runs_capacity); ++i) runs[i] = to_c(p.runs[i]);
    for (size_t i = 0; i < std::min(p.layer_begin.size(), layer_begin_capacity); ++i)
      layer_begin[i] = static_cast<int64_t>(p.layer_begin[i]);
    *info = mla_transfer_plan_info{static_cast<int64_t>(p.runs.size()),
                                   static_cast<int64_t>(p.layer_begin.size()),
                                   p.total_bytes,
                                   p.largest_run,
                                   int32_t(p.order),
                                   0};
    return Status::Ok();
  });
}

int32_t mla_layer_bases(void* base, int64_t layer_stride, int32_t num_layers, void** out,
                        size_t capacity) {
  return guarded([&] {
    MLA_TRY(expect_array(out, capacity, "out", "capacity"));
    if (num_layers < 0)
      return Status(Errc::invalid_value, fmt::format("num_layers = {} is negative", num_layers));
    const std::vector<void*> v = layer_bases(base, layer_stride, num_layers);
    std::copy_n(v.begin(), std::min(v.size(), capacity), out);
    return Status::Ok();
  });
}

int32_t mla_execute_copy_plan(const mla_copy_run* runs, size_t num_runs,
                              const mla_transfer_buffers* src, const mla_transfer_buffers* dst) {
  return guarded([&] {
    MLA_TRY(expect_array(runs, num_runs, "runs", "num_runs"));
    TransferPlan plan;
    plan.runs.resize(num_runs);
    for (size_t i = 0; i < num_runs; ++i) MLA_TRY(from_c(runs[i], i, &plan.runs[i]));
    plan.layer_begin = {0, num_runs};
    TransferBuffers s, d;
    MLA_TRY(to_buffers(src, "src", &s));
    MLA_TRY(to_buffers(dst, "dst", &d));
    return execute_copy_plan(plan, s, d);
  });
}

int32_t mla_launch_info_from_env(mla_launch_info* out, mla_env_lookup_fn lookup, void* user) {
  return guarded([&] {
    MLA_TRY(expect_pointer(out, "out"));
    LaunchInfo li;
    std::function<const char*(const char*)> get;
    if (lookup != nullptr) get = [&](const char* name) { return lookup(name, user); };
    MLA_TRY(launch_info_from_env(&li, get));
    if (li.master_addr.size() >= MLA_MASTER_ADDR_MAX)
      return Status(Errc::invalid_value, fmt::format("MASTER_ADDR = \"{}\" is longer than {} bytes",
                                                     li.master_addr, int(MLA_MASTER_ADDR_MAX) - 1));
    *out = mla_launch_info{li.rank, li.world_size, li.local_rank, li.master_port, {}};
    std::memcpy(out->master_addr, li.master_addr.c_str(), li.master_addr.size() + 1);
    return Status::Ok();
  });
}

int32_t mla_exchange_bytes_tcp(const mla_launch_info* who, void* bytes, size_t size,
                               int32_t timeout_ms) {
  return guarded([&] {
    LaunchInfo li;
    MLA_TRY(to_launch_info(who, &li));
    MLA_TRY(expect_array(bytes, size, "bytes", "size"));
    return exchange_bytes_tcp(li, bytes, size, timeout_ms);
  });
}

int32_t mla_exchange_bytes_file(const mla_launch_info* who, const char* path, void* bytes,
                                size_t size, int32_t timeout_ms) {
  return guarded([&] {
    LaunchInfo li;
    MLA_TRY(to_launch_info(who, &li));
    MLA_TRY(expect_pointer(path, "path"));
    MLA_TRY(expect_array(bytes, size, "bytes", "size"));
    return exchange_bytes_file(li, path, bytes, size, timeout_ms);
  });
}

}  // extern "C"
