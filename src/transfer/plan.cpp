// plan_transfer: a request's token range on two paged pools -> byte copies.
// Tokens are walked in order; a piece ends where either side's page ends, so
// every piece is contiguous on both sides, and a piece that continues the
// previous one on both sides extends it (coalescing). Pages that the two pools
// happen to place back to back (a fresh pool hands out consecutive ids) thus
// become one large run.
#include <algorithm>
#include <cstring>

#include "common/checked.hpp"
#include "common/validate.hpp"
#include "mla/indexer.hpp"
#include "mla/transfer.hpp"
#include "transfer/schedule.hpp"

namespace mla {
namespace {

using detail::error;
using Layout = IndexerCacheLayout;

const char* side_name(TransferCache c, bool src) {
  if (c == TransferCache::latent) return src ? "src_latent" : "dst_latent";
  return src ? "src_indexer" : "dst_indexer";
}

// Bytes a page holds (its stride may be larger).
int64_t page_bytes(TransferCache c, const TransferSide& s, KvFormat f) {
  return c == TransferCache::latent ? s.page_size * kv_entry_bytes(f) : Layout::kPageBytes;
}

int64_t page_stride(TransferCache c, const TransferSide& s, KvFormat f) {
  return s.page_stride ? s.page_stride : page_bytes(c, s, f);
}

Status check_side(TransferCache c, bool src, const TransferSide& s, const TransferRequest& r) {
  const char* n = side_name(c, src);
  const KvFormat f = src ? r.src_format : r.dst_format;
  if (c == TransferCache::indexer && s.page_size != Layout::kPageTokens)
    return error(Errc::invalid_value,
                 "{}.page_size = {}: the indexer cache has pages of {} tokens (8448 bytes)", n,
                 s.page_size, Layout::kPageTokens);
  if (s.page_size < 1)
    return error(Errc::invalid_value, "{}.page_size = {} must be >= 1", n, s.page_size);
  if (s.num_pages < 0)
    return error(Errc::invalid_value, "{}.num_pages = {} is negative", n, s.num_pages);
  // Every byte offset the plan computes is below num_pages * page_stride (+
  // num_layers * layer_stride): with those checked, none of them wraps.
  int64_t pool = 0;
  if (c == TransferCache::latent)
    MLA_TRY(detail::checked_product({s.page_size, kv_entry_bytes(f)},
                                    fmt::format("{}.page_size: page bytes page_size * entry", n),
                                    &pool));
  const int64_t pb = page_bytes(c, s, f);
  if (s.page_stride != 0 && s.page_stride < pb)
    return error(Errc::invalid_stride,
                 "{}.page_stride = {} bytes is below the page's {} bytes ({} tokens of {} B)", n,
                 s.page_stride, pb, s.page_size,
                 c == TransferCache::latent ? kv_entry_bytes(f) : 132);
  if (s.layer_stride < 0)
    return error(Errc::invalid_stride, "{}.layer_stride = {} is negative", n, s.layer_stride);
  const int64_t ps = page_stride(c, s, f);
  int64_t layers_bytes = 0;
  MLA_TRY(detail::checked_product(
      {s.num_pages, ps}, fmt::format("{}.num_pages: pool bytes num_pages * page_stride", n),
      &pool));
  MLA_TRY(detail::checked_product(
      {int64_t(r.num_layers), s.layer_stride},
      fmt::format("{}.layer_stride: layer bytes num_layers * layer_stride", n), &layers_bytes));
  MLA_TRY(detail::checked_sum({pool, layers_bytes}, fmt::format("{}: the pools' bytes", n), &pool));
  if (s.layer_stride != 0 && r.num_layers > 1) {
    // Layers must not overlap: layer-major (a layer's whole pool, then the
    // next) or page-major (a page holds every layer's slice).
    const bool layer_major = s.layer_stride >= s.num_pages * ps;
    const bool page_major = s.layer_stride >= pb && ps >= r.num_layers * s.layer_stride;
    if (!layer_major && !page_major)
      return error(Errc::invalid_stride,
                   "{}.layer_stride = {} bytes makes layers overlap (num_pages * page_stride = {} "
                   "for layer-major pools; page_stride = {} < num_layers * layer_stride = {} for "
                   "page-major ones)",
                   n, s.layer_stride, s.num_pages * ps, ps, r.num_layers * s.layer_stride);
  }
  const int64_t end = r.first_token + r.num_tokens;  // checked in check_request
  int64_t capacity = 0;  // saturates: no token range reaches past it then
  if (!detail::mul_ok(static_cast<int64_t>(s.pages.size()), s.page_size, &capacity))
    capacity = INT64_MAX;
  if (end > capacity)
    return error(Errc::out_of_range,
                 "first_token + num_tokens = {} is past the capacity of {}: {} pages * {} = {}",
                 end, n, s.pages.size(), s.page_size, capacity);
  if (r.num_tokens == 0) return Status::Ok();
  for (int64_t j = r.first_token / s.page_size; j <= (end - 1) / s.page_size; ++j) {
    const int64_t id = s.pages[j];
    if (id < 0 || id >= s.num_pages)
      return error(
          Errc::out_of_range, "{}.pages[{}] = {} is {}", n, j, id,
          id < 0 ? std::string("negative") : fmt::format("past num_pages = {}", s.num_pages));
  }
  return Status::Ok();
}

Status check_request(const TransferRequest& r) {
  if (r.num_layers < 1 || r.num_layers > kMaxTransferLayers)
    return error(Errc::invalid_value, "num_layers = {} must be in [1, {}]", r.num_layers,
                 kMaxTransferLayers);
  if (r.first_token < 0)
    return error(Errc::out_of_range, "first_token = {} is negative", r.first_token);
  if (r.num_tokens < 0)
    return error(Errc::out_of_range, "num_tokens = {} is negative", r.num_tokens);
  int64_t end = 0;
  MLA_TRY(detail::checked_sum({r.first_token, r.num_tokens}, "first_token + num_tokens", &end));
  if (r.src_format != r.dst_format)
    return error(Errc::invalid_value,
                 "src_format = {} does not match dst_format = {} (a transfer moves bytes; it does "
                 "not convert)",
                 kv_format_name(r.src_format), kv_format_name(r.dst_format));
  if (r.order != TransferOrder::by_layer && r.order != TransferOrder::whole)
    return error(Errc::invalid_value, "order = {} is not a TransferOrder", int(r.order));
  MLA_TRY(check_side(TransferCache::latent, true, r.src_latent, r));
  MLA_TRY(check_side(TransferCache::latent, false, r.dst_latent, r));
  if (r.with_indexer) {
    MLA_TRY(check_side(TransferCache::indexer, true, r.src_indexer, r));
    MLA_TRY(check_side(TransferCache::indexer, false, r.dst_indexer, r));
  }
  return Status::Ok();
}

// Appends a copy, extending the last run when it continues it on both sides.
void emit(std::vector<CopyRun>& runs, const CopyRun& r) {
  if (r.bytes == 0) return;
  if (!runs.empty()) {
    CopyRun& last = runs.back();
    if (last.layer == r.layer && last.cache == r.cache &&
        last.src_offset + last.bytes == r.src_offset &&
        last.dst_offset + last.bytes == r.dst_offset) {
      last.bytes += r.bytes;
      return;
    }
  }
  runs.push_back(r);
}

// Latent entries are token-major: a token range of a page is one byte range.
void plan_latent(const TransferRequest& r, int32_t layer, std::vector<CopyRun>& runs) {
  const TransferSide &s = r.src_latent, &d = r.dst_latent;
  const int64_t e = kv_entry_bytes(r.src_format);
  const int64_t ss = page_stride(TransferCache::latent, s, r.src_format);
  const int64_t ds = page_stride(TransferCache::latent, d, r.dst_format);
  const int64_t end = r.first_token + r.num_tokens;
  for (int64_t t = r.first_token; t < end;) {
    const int64_t so = t % s.page_size, dof = t % d.page_size;
    const int64_t n = std::min({s.page_size - so, d.page_size - dof, end - t});
    emit(runs, {s.pages[t / s.page_size] * ss + so * e, d.pages[t / d.page_size] * ds + dof * e,
                n * e, layer, TransferCache::latent});
    t += n;
  }
}

// Indexer pages are not token-major (codes, then scales): a whole page is one
// range; a partial one is two (its codes and its scales).
void plan_indexer(const TransferRequest& r, int32_t layer, std::vector<CopyRun>& runs) {
  const TransferSide &s = r.src_indexer, &d = r.dst_indexer;
  const int64_t ss = page_stride(TransferCache::indexer, s, r.src_format);
  const int64_t ds = page_stride(TransferCache::indexer, d, r.dst_format);
  constexpr int64_t P = Layout::kPageTokens;
  const int64_t end = r.first_token + r.num_tokens;
  for (int64_t t = r.first_token; t < end;) {
    const int64_t off = t % P, n = std::min(P - off, end - t);
    const int64_t sp = s.pages[t / P] * ss, dp = d.pages[t / P] * ds;
    if (n == P) {
      emit(runs, {sp, dp, Layout::kPageBytes, layer, TransferCache::indexer});
    } else {
      constexpr int64_t kCode = Layout::kCodeBytes / P, kScale = 4;
      emit(runs, {sp + off * kCode, dp + off * kCode, n * kCode, layer, TransferCache::indexer});
      const int64_t so = Layout::kScaleOffset + off * kScale;
      emit(runs, {sp + so, dp + so, n * kScale, layer, TransferCache::indexer});
    }
    t += n;
  }
}

// whole order: sort a cache kind's runs by source address and merge those
// contiguous on both sides, across layers where both pools are one allocation.
void coalesce_whole(const TransferSide& s, const TransferSide& d, std::vector<CopyRun>& runs) {
  const bool across = s.layer_stride != 0 && d.layer_stride != 0;
  auto abs_src = [&](const CopyRun& r) { return r.src_offset + r.layer * s.layer_stride; };
  auto abs_dst = [&](const CopyRun& r) { return r.dst_offset + r.layer * d.layer_stride; };
  std::stable_sort(runs.begin(), runs.end(), [&](const CopyRun& a, const CopyRun& b) {
    if (!across && a.layer != b.layer) return a.layer < b.layer;
    return abs_src(a) < abs_src(b);
  });
  std::vector<CopyRun> out;
  for (const CopyRun& r : runs) {
    if (!out.empty()) {
      CopyRun& last = out.back();
      const bool same_pool = across || last.layer == r.layer;
      if (same_pool && abs_src(last) + last.bytes == abs_src(r) &&
          abs_dst(last) + last.bytes == abs_dst(r)) {
        last.bytes += r.bytes;
        continue;
      }
    }
    out.push_back(r);
  }
  // A run merged across layers keeps its first layer; its offsets stay relative
  // to that layer's base on both sides, which is what an executor adds them to.
  runs = std::move(out);
}

}  // namespace

const char* transfer_cache_name(TransferCache c) noexcept {
  switch (c) {
    case TransferCache::latent: return "latent";
    case TransferCache::indexer: return "indexer";
  }
  return "?";
}

Status plan_transfer(const TransferRequest& req, TransferPlan* plan) {
  if (plan == nullptr) return error(Errc::invalid_value, "plan: output pointer is null");
  MLA_TRY(check_request(req));
  TransferPlan p;
  p.order = req.order;
  if (req.order == TransferOrder::by_layer) {
    p.layer_begin.push_back(0);
    for (int32_t l = 0; l < req.num_layers; ++l) {
      plan_latent(req, l, p.runs);
      if (req.with_indexer) plan_indexer(req, l, p.runs);
      p.layer_begin.push_back(p.runs.size());
    }
  } else {
    std::vector<CopyRun> latent, indexer;
    for (int32_t l = 0; l < req.num_layers; ++l) {
      plan_latent(req, l, latent);
      if (req.with_indexer) plan_indexer(req, l, indexer);
    }
    coalesce_whole(req.src_latent, req.dst_latent, latent);
    if (req.with_indexer) coalesce_whole(req.src_indexer, req.dst_indexer, indexer);
    p.runs = std::move(latent);
    p.runs.insert(p.runs.end(), indexer.begin(), indexer.end());
    p.layer_begin = {0, p.runs.size()};
  }
  for (const CopyRun& r : p.runs) {
    p.total_bytes += r.bytes;
    p.largest_run = std::max(p.largest_run, r.bytes);
  }
  *plan = std::move(p);
  return Status::Ok();
}

std::vector<void*> layer_bases(void* base, int64_t layer_stride, int32_t num_layers) {
  std::vector<void*> v(std::max(num_layers, 0));
  for (int32_t l = 0; l < num_layers; ++l) v[l] = static_cast<char*>(base) + l * layer_stride;
  return v;
}

Status execute_copy_plan(const TransferPlan& plan, const TransferBuffers& src,
                         const TransferBuffers& dst) {
  // Check every base before the first copy: a plan runs entirely or not at all.
  for (const CopyRun& r : plan.runs) {
    void* p;
    MLA_TRY(transfer::run_base(src, r, "src", &p));
    MLA_TRY(transfer::run_base(dst, r, "dst", &p));
  }
  for (const CopyRun& r : plan.runs) {
    void *s, *d;
    MLA_TRY(transfer::run_base(src, r, "src", &s));
    MLA_TRY(transfer::run_base(dst, r, "dst", &d));
    std::memcpy(static_cast<char*>(d) + r.dst_offset, static_cast<const char*>(s) + r.src_offset,
                r.bytes);
  }
  return Status::Ok();
}

}  // namespace mla
