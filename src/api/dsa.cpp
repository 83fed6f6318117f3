// The DSA decode step (mla/dsa.hpp): the dispatch rule, the workspace layout of
// the sparse path, and the composition of the public ops. No kernel code: every
// stage is the public entry point, which validates and picks its backend.
#include "mla/dsa.hpp"

#include <algorithm>
#include <array>
#include <span>

#include "api/attention_checks.hpp"
#include "api/backend.hpp"
#include "api/device_values.hpp"
#include "api/paged_checks.hpp"
#include "common/checked.hpp"
#include "common/validate.hpp"
#include "mla/sparse.hpp"
#include "mla/topk.hpp"
#include "reference/tensor_read.hpp"

namespace mla {

using detail::error;
using detail::expect_dtype;
using detail::expect_same_device;
using detail::expect_shape;
using detail::kAny;

namespace {

// Every piece of the sparse path's scratch starts on a 256-byte boundary (the
// kernels' vector loads and cp.async want 16; 256 is what cudaMalloc gives).
constexpr int64_t kAlign = 256;
// Logits rows are padded to whole 64-float groups so each row starts aligned.
constexpr int64_t kLogitsRowAlign = 64;

// Every tensor of a step, named as its argument: the eight inputs, then out and lse.
std::array<detail::Named, 10> named_tensors(const DsaDecodeArgs& a) {
  return {{{&a.q, "q"},
           {&a.kv.data, "kv"},
           {&a.block_table, "block_table"},
           {&a.cache_seqlens, "cache_seqlens"},
           {&a.index_q8, "index_q8"},
           {&a.index_w_folded, "index_w_folded"},
           {&a.index_cache.data, "index_cache"},
           {&a.index_block_table, "index_block_table"},
           {&a.out, "out"},
           {&a.lse, "lse"}}};
}

const char* path_name(DsaPath p) {
  switch (p) {
    case DsaPath::automatic: return "automatic";
    case DsaPath::dense: return "dense";
    case DsaPath::sparse: return "sparse";
  }
  return "?";
}

Status validate_policy(const DsaPolicy& p) {
  if (p.topk < kTopkGranule || p.topk > kTopkMax || p.topk % kTopkGranule != 0)
    return error(Errc::invalid_value,
                 "policy.topk = {} is not allowed: it must be a multiple of {} in [{}, {}]", p.topk,
                 kTopkGranule, kTopkGranule, kTopkMax);
  if (p.dense_below < kDsaDenseBelowMeasured)
    return error(
        Errc::invalid_value,
        "policy.dense_below = {} is negative (only {}, the measured crossover, is allowed)",
        p.dense_below, kDsaDenseBelowMeasured);
  if (p.path != DsaPath::automatic && p.path != DsaPath::dense && p.path != DsaPath::sparse)
    return error(Errc::invalid_value,
                 "policy.path = {} is not automatic (0), dense (1) or sparse (2)",
                 static_cast<int>(p.path));
  return Status::Ok();
}

// What both paths share: q, cache_seqlens, max_seqlen and the indexer inputs
// (checked on the dense path too, so an engine's mistake shows at the first
// step, not at the first long request).
Status validate_common(const DsaDecodeArgs& a, const DsaPolicy& p) {
  MLA_TRY(validate_policy(p));
  MLA_TRY(detail::expect_absorbed_query(a.q));
  const int64_t B = a.q.shape[0], s_q = a.q.shape[1];
  if (a.max_seqlen < 0)
    return error(Errc::invalid_value,
                 "max_seqlen = {} is negative (it is the host-side upper bound of cache_seqlens)",
                 a.max_seqlen);
  MLA_TRY(expect_shape(a.cache_seqlens, "cache_seqlens", {B}, "[B]"));
  MLA_TRY(expect_dtype(a.cache_seqlens, "cache_seqlens", {DType::i32}));
  MLA_TRY(expect_same_device(a.q, "q", a.cache_seqlens, "cache_seqlens"));
  MLA_TRY(expect_shape(a.index_q8, "index_q8", {B, s_q, kIndexerHeads, kIndexerDim},
                       "[B, s_q, 64, 128]"));
  MLA_TRY(expect_dtype(a.index_q8, "index_q8", {DType::e4m3}));
  MLA_TRY(
      expect_shape(a.index_w_folded, "index_w_folded", {B, s_q, kIndexerHeads}, "[B, s_q, 64]"));
  MLA_TRY(expect_dtype(a.index_w_folded, "index_w_folded", {DType::f32}));
  MLA_TRY(validate_indexer_cache(a.index_cache, "index_cache"));
  // Everything the stages check on these views is checked here, under the
  // step's names (the stages name their own parameters: q8, block_table...).
  for (auto [t, name] :
       {std::pair{&a.index_q8, "index_q8"}, std::pair{&a.index_w_folded, "index_w_folded"},
        std::pair{&a.index_cache.data, "index_cache"}}) {
    MLA_TRY(detail::expect_inner_contiguous(*t, name, 1));
    MLA_TRY(expect_same_device(a.q, "q", *t, name));
  }
  if (detail::on_cuda(a.q.device)) MLA_TRY(detail::expect_aligned(a.index_q8, "index_q8", 16));
  if (a.index_block_table.defined()) {
    MLA_TRY(
        expect_shape(a.index_block_table, "index_block_table", {B, kAny}, "[B, max_index_pages]"));
    MLA_TRY(expect_dtype(a.index_block_table, "index_block_table", {DType::i32}));
    MLA_TRY(detail::expect_inner_contiguous(a.index_block_table, "index_block_table", 1));
    MLA_TRY(expect_same_device(a.q, "q", a.index_block_table, "index_block_table"));
  } else {
    MLA_TRY(detail::expect_cache_for(a.kv, "kv", "the DSA step"));
    if (a.kv.page_size() != IndexerCacheLayout::kPageTokens)
      return error(Errc::invalid_value,
                   "index_block_table: not given, so block_table also addresses the indexer cache "
                   "(pages of {} tokens), but kv.page_size() = {}; pass the indexer's own table",
                   IndexerCacheLayout::kPageTokens, a.kv.page_size());
  }
  // Outputs: out and lse may share memory with no input nor each other (the
  // dense and sparse stages check their own; the indexer inputs only meet
  // here).
  const auto t = named_tensors(a);
  return detail::expect_disjoint(std::span(t).last(2), std::span(t).first(8));
}

// CPU tensors only: the lengths the host may read. Each is in [0, max_seqlen].
Status check_host_lengths(const DsaDecodeArgs& a) {
  for (int64_t b = 0; b < a.q.shape[0]; ++b) {
    const int64_t len = reference::read_int(a.cache_seqlens, {b});
    if (len < 0) return error(Errc::out_of_range, "cache_seqlens[{}] = {} is negative", b, len);
    if (len > a.max_seqlen)
      return error(Errc::out_of_range, "cache_seqlens[{}] = {} is past max_seqlen = {}", b, len,
                   a.max_seqlen);
  }
  if (a.index_block_table.defined())
    MLA_TRY(detail::check_block_table_values(
        a.index_block_table, a.cache_seqlens, IndexerCacheLayout::kPageTokens,
        a.index_cache.num_pages(), /*max_len=*/-1, "index_block_table", "index_cache"));
  return Status::Ok();
}

// No request or no new token: nothing to compute, no scratch, no launch.
bool empty_step(const DsaDecodeArgs& a) {
  return a.q.shape[0] == 0 || a.q.shape[1] == 0;
}

DsaPath choose_path(const DsaDecodeArgs& a, const DsaPolicy& p) {
  if (p.path != DsaPath::automatic) return p.path;
  int64_t below = p.dense_below;
  if (below == kDsaDenseBelowMeasured)
    below = a.kv.format == KvFormat::fp8_ds_mla ? kDsaDenseBelowH200Fp8 : kDsaDenseBelowH200Bf16;
  return a.max_seqlen <= std::max<int64_t>(p.topk, below) ? DsaPath::dense : DsaPath::sparse;
}

DecodeArgs dense_args(const DsaDecodeArgs& a) {
  DecodeArgs d;
  d.q = a.q;
  d.kv = a.kv;
  d.block_table = a.block_table;
  d.cache_seqlens = a.cache_seqlens;
  d.softmax_scale = a.softmax_scale;
  d.causal = true;  // the s_q new tokens see each other causally, as the indexer masks them
  d.out = a.out;
  d.lse = a.lse;
  return d;
}

TensorView view_at(void* data, DType dt, Device dev, std::initializer_list<int64_t> shape,
                   std::initializer_list<int64_t> strides) {
  TensorView t;
  t.data = data;
  t.dtype = dt;
  t.device = dev;
  t.ndim = static_cast<int32_t>(shape.size());
  std::copy(shape.begin(), shape.end(), t.shape);
  std::copy(strides.begin(), strides.end(), t.strides);
  return t;
}

// The sparse path's scratch, as offsets from an aligned base (for sizing, no
// base: the views are then only shapes, which sparse_workspace_size accepts).
struct SparsePlan {
  int64_t B = 0, s_q = 0, R = 0, width = 0, row_stride = 0;
  int64_t logits_off = 0, indices_off = 0, lengths_off = 0, sparse_off = 0;
  size_t sparse_bytes = 0;
  int64_t total = 0;  // from an aligned base
  TensorView logits3, logits2, indices2, indices3, lengths;
  SparseDecodeArgs sparse;
};

Status plan_sparse(const DsaDecodeArgs& a, const DsaPolicy& p, char* base, SparsePlan* sp) {
  const Device dev = a.q.device;
  const bool cpu = !detail::on_cuda(dev);
  sp->B = a.q.shape[0];
  sp->s_q = a.q.shape[1];
  sp->R = sp->B * sp->s_q;  // q's element count bounds it
  sp->width = a.max_seqlen;
  // max_seqlen is the caller's number: every size derived from it is checked
  // (a wrapped logits size would make the indexer write past the workspace).
  const std::string ms = fmt::format("max_seqlen = {}", a.max_seqlen);
  MLA_TRY(detail::checked_round_up(std::max<int64_t>(a.max_seqlen, kLogitsRowAlign),
                                   kLogitsRowAlign, ms + ": the logits row", &sp->row_stride));
  detail::ByteLayout lay(kAlign);
  MLA_TRY(lay.add({sp->R, sp->row_stride, int64_t(sizeof(float))},
                  ms + ": the logits scratch B * s_q * round_up(max_seqlen, 64) * 4 bytes",
                  &sp->logits_off));
  MLA_TRY(lay.add({sp->R, p.topk, int64_t(sizeof(int32_t))},
                  "the index lists B * s_q * policy.topk * 4 bytes", &sp->indices_off));
  if (cpu) MLA_TRY(lay.add({sp->R, int64_t(sizeof(int32_t))}, "the row lengths", &sp->lengths_off));
  auto at = [&](int64_t o) -> void* { return base == nullptr ? nullptr : base + o; };
  sp->logits3 = view_at(at(sp->logits_off), DType::f32, dev, {sp->B, sp->s_q, sp->width},
                        {sp->s_q * sp->row_stride, sp->row_stride, 1});
  sp->logits2 =
      view_at(at(sp->logits_off), DType::f32, dev, {sp->R, sp->width}, {sp->row_stride, 1});
  sp->indices2 = view_at(at(sp->indices_off), DType::i32, dev, {sp->R, p.topk}, {p.topk, 1});
  sp->indices3 = view_at(at(sp->indices_off), DType::i32, dev, {sp->B, sp->s_q, p.topk},
                         {sp->s_q * p.topk, p.topk, 1});
  if (cpu) sp->lengths = view_at(at(sp->lengths_off), DType::i32, dev, {sp->R}, {1});
  sp->sparse.q = a.q;
  sp->sparse.kv = a.kv;
  sp->sparse.indices = sp->indices3;
  sp->sparse.softmax_scale = a.softmax_scale;
  sp->sparse.out = a.out;
  sp->sparse.lse = a.lse;
  MLA_TRY(sparse_workspace_size(sp->sparse, &sp->sparse_bytes));
  MLA_TRY(lay.add_bytes(static_cast<int64_t>(sp->sparse_bytes), ms + ": the step's scratch",
                        &sp->sparse_off));
  sp->total = lay.bytes();
  return Status::Ok();
}

Status workspace_for(const DsaDecodeArgs& a, const DsaPolicy& p, DsaPath path, size_t* bytes) {
  if (path == DsaPath::dense) return decode_workspace_size(dense_args(a), p.dense_options, bytes);
  SparsePlan sp;
  MLA_TRY(plan_sparse(a, p, nullptr, &sp));  // views of shapes only: the ops' sizing reads no data
  // Slack so that any base address can be rounded up to the alignment.
  int64_t total = 0;
  MLA_TRY(detail::checked_sum({sp.total, kAlign - 1},
                              fmt::format("max_seqlen = {}: the workspace", a.max_seqlen), &total));
  *bytes = static_cast<size_t>(total);
  return Status::Ok();
}

Status run_sparse(const DsaDecodeArgs& a, const DsaPolicy& p, Workspace ws,
                  const ExecContext& ctx) {
  const uintptr_t raw = reinterpret_cast<uintptr_t>(ws.data);
  char* base = reinterpret_cast<char*>((raw + kAlign - 1) / kAlign * kAlign);
  SparsePlan sp;
  MLA_TRY(plan_sparse(a, p, base, &sp));

  // 1. Indexer logits [B, s_q, max_seqlen]; -inf past each query's causal limit.
  IndexerLogitsDecodeArgs il;
  il.q8 = a.index_q8;
  il.w_folded = a.index_w_folded;
  il.cache = a.index_cache;
  il.block_table = a.index_block_table.defined() ? a.index_block_table : a.block_table;
  il.cache_seqlens = a.cache_seqlens;
  il.logits = sp.logits3;
  MLA_TRY(indexer_logits_decode(il, ctx));

  // 2. Top-k per (request, new token), translated to global slots of kv. On CPU
  // each row's length is its request's (the host may read it, and the reference
  // then checks exactly the block-table entries in use); on CUDA every row
  // spans max_seqlen: positions past a request's length hold -inf, are never
  // selected and so never translated.
  TopkArgs tk;
  tk.logits = sp.logits2;
  if (sp.lengths.defined()) {
    for (int64_t b = 0; b < sp.B; ++b) {
      const int64_t len = reference::read_int(a.cache_seqlens, {b});
      for (int64_t i = 0; i < sp.s_q; ++i)
        sp.lengths.ptr<int32_t>()[b * sp.s_q + i] = static_cast<int32_t>(len);
    }
    tk.lengths = sp.lengths;
  }
  tk.k = p.topk;
  tk.indices = sp.indices2;
  tk.block_table = a.block_table;
  MLA_TRY(detail::checked_int32(a.kv.page_size(), "kv.page_size", &tk.page_size));
  MLA_TRY(detail::checked_int32(sp.s_q, "q: s_q", &tk.rows_per_request));
  tk.num_pages = a.kv.num_pages();
  // Sparse attention sums over the list in any order (mla/sparse.hpp), so the
  // step skips the best-first sort.
  tk.order = TopkOrder::by_position;
  MLA_TRY(topk_indices(tk, ctx));

  // 3. Sparse attention over the lists (-1 entries skipped).
  return sparse_decode(sp.sparse, Workspace{base + sp.sparse_off, sp.sparse_bytes}, ctx);
}

}  // namespace

Status dsa_decode_path(const DsaDecodeArgs& a, const DsaPolicy& p, DsaPath* path) {
  if (path == nullptr) return error(Errc::invalid_value, "path: output pointer is null");
  MLA_TRY(validate_policy(p));
  if (a.max_seqlen < 0)
    return error(Errc::invalid_value, "max_seqlen = {} is negative", a.max_seqlen);
  *path = choose_path(a, p);
  return Status::Ok();
}

Status dsa_decode_workspace_size(const DsaDecodeArgs& a, const DsaPolicy& p, size_t* bytes) {
  if (bytes == nullptr) return error(Errc::invalid_value, "bytes: output pointer is null");
  *bytes = 0;
  // Sizing reads shapes only: the caller may size before it owns the buffers.
  DsaDecodeArgs s = a;
  for (TensorView* t :
       {&s.q, &s.kv.data, &s.block_table, &s.cache_seqlens, &s.index_q8, &s.index_w_folded,
        &s.index_cache.data, &s.index_block_table, &s.out, &s.lse})
    *t = detail::shape_only(*t);
  MLA_TRY(validate_common(s, p));
  if (empty_step(s)) return Status::Ok();
  return workspace_for(s, p, choose_path(s, p), bytes);
}

Status dsa_decode(const DsaDecodeArgs& a, const DsaPolicy& p, Workspace ws,
                  const ExecContext& ctx) {
  MLA_TRY(validate_common(a, p));
  if (empty_step(a)) return Status::Ok();
  const DsaPath path = choose_path(a, p);
  size_t need = 0;
  MLA_TRY(workspace_for(a, p, path, &need));
  if (need > 0 && (ws.data == nullptr || ws.bytes < need))
    return error(Errc::insufficient_workspace,
                 "workspace: {} bytes given{}, the {} path of dsa_decode needs {} bytes "
                 "(dsa_decode_workspace_size)",
                 ws.data == nullptr ? 0 : ws.bytes, ws.data == nullptr ? " (null)" : "",
                 path_name(path), need);
  MLA_TRY(detail::expect_workspace_disjoint(ws.data, ws.bytes, a.q.device, named_tensors(a)));
  if (!detail::on_cuda(a.q.device)) {
    MLA_TRY(check_host_lengths(a));
  } else if (ctx.check_device_values) {  // the stages then check their own tensors
    MLA_TRY(detail::check_on_host(a,
                                  {{&DsaDecodeArgs::cache_seqlens, "cache_seqlens"},
                                   {&DsaDecodeArgs::index_block_table, "index_block_table"}},
                                  ctx, check_host_lengths));
  }
  if (path == DsaPath::dense) return mla_decode(dense_args(a), p.dense_options, ws, ctx);
  return run_sparse(a, p, ws, ctx);
}

}  // namespace mla
