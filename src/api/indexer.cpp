// Public entry points of the lightning indexer: validate, then dispatch.
#include "mla/indexer.hpp"

#include "api/backend.hpp"
#include "api/device_values.hpp"
#include "api/indexer_checks.hpp"
#ifdef MLA_HAS_CUDA
#include "cuda/indexer/indexer_cuda.hpp"
#endif
#include "api/paged_checks.hpp"
#include "common/validate.hpp"
#include "reference/indexer_ref.hpp"
#include "reference/tensor_read.hpp"

namespace mla {

using detail::error;
using detail::expect_dtype;
using detail::expect_inner_contiguous;
using detail::expect_same_device;
using detail::expect_shape;
using detail::kAny;
using L = IndexerCacheLayout;

namespace detail {
Status check_key_ranges(const TensorView& k_start, const TensorView& k_end, int64_t N) {
  for (int64_t t = 0; t < k_start.shape[0]; ++t) {
    const int64_t lo = reference::read_int(k_start, {t}), hi = reference::read_int(k_end, {t});
    if (lo < 0) return error(Errc::out_of_range, "k_start[{}] = {} is negative", t, lo);
    if (hi < lo)
      return error(Errc::out_of_range, "k_end[{}] = {} is before k_start[{}] = {}", t, hi, t, lo);
    if (hi > N) return error(Errc::out_of_range, "k_end[{}] = {} is past N = {} keys", t, hi, N);
  }
  return Status::Ok();
}

Status validate_prefill_inputs(const IndexerLogitsPrefillArgs& a) {
  MLA_TRY(expect_shape(a.q8, "q8", {kAny, kIndexerHeads, kIndexerDim}, "[T, 64, 128]"));
  MLA_TRY(detail::expect_known_device(a.q8, "q8"));
  const int64_t T = a.q8.shape[0];
  MLA_TRY(expect_dtype(a.q8, "q8", {DType::e4m3}));
  MLA_TRY(expect_shape(a.w_folded, "w_folded", {T, kIndexerHeads}, "[T, 64]"));
  MLA_TRY(expect_dtype(a.w_folded, "w_folded", {DType::f32}));
  MLA_TRY(expect_shape(a.k8, "k8", {kAny, kIndexerDim}, "[N, 128]"));
  MLA_TRY(expect_dtype(a.k8, "k8", {DType::e4m3}));
  const int64_t N = a.k8.shape[0];
  MLA_TRY(expect_shape(a.k_scale, "k_scale", {N}, "[N]"));
  MLA_TRY(expect_dtype(a.k_scale, "k_scale", {DType::f32}));
  for (auto [t, name] : {std::pair{&a.k_start, "k_start"}, std::pair{&a.k_end, "k_end"}}) {
    MLA_TRY(expect_shape(*t, name, {T}, "[T]"));
    MLA_TRY(expect_dtype(*t, name, {DType::i32}));
  }
  for (auto [t, name] : {std::pair{&a.q8, "q8"}, std::pair{&a.w_folded, "w_folded"},
                         std::pair{&a.k8, "k8"}, std::pair{&a.k_scale, "k_scale"},
                         std::pair{&a.k_start, "k_start"}, std::pair{&a.k_end, "k_end"}}) {
    MLA_TRY(expect_inner_contiguous(*t, name, 1));
    MLA_TRY(expect_same_device(a.q8, "q8", *t, name));
  }
  return Status::Ok();
}

}  // namespace detail

namespace {
// block_table and cache_seqlens of a validated decode call (host views).
Status check_block_table(const IndexerLogitsDecodeArgs& a) {
  return detail::check_block_table_values(a.block_table, a.cache_seqlens, L::kPageTokens,
                                          a.cache.num_pages(), a.logits.shape[2]);
}
}  // namespace

Status validate_indexer_cache(const IndexerCacheView& cache, const char* name) {
  const TensorView& d = cache.data;
  const std::string what = fmt::format("{}.data", name);
  MLA_TRY(expect_shape(d, what.c_str(), {kAny, L::kPageBytes}, "[num_pages, 8448]"));
  MLA_TRY(detail::expect_known_device(d, what.c_str()));
  MLA_TRY(expect_dtype(d, what.c_str(), {DType::u8, DType::e4m3}));
  MLA_TRY(expect_inner_contiguous(d, what.c_str(), 1));
  if (d.shape[0] > 1 && d.strides[0] < L::kPageBytes)
    return error(Errc::invalid_stride, "{}: page stride {} is smaller than 8448 (pages overlap)",
                 what, d.strides[0]);
  return Status::Ok();
}

Status append_indexer_keys(const AppendIndexerKeysArgs& a, const ExecContext& ctx) {
  MLA_TRY(validate_indexer_cache(a.cache, "cache"));
  MLA_TRY(expect_shape(a.slots, "slots", {kAny}, "[T]"));
  MLA_TRY(expect_dtype(a.slots, "slots", {DType::i64}));
  MLA_TRY(expect_shape(a.keys, "keys", {a.slots.shape[0], kIndexerDim}, "[T, 128]"));
  MLA_TRY(expect_dtype(a.keys, "keys", {DType::f32, DType::bf16}));
  MLA_TRY(expect_inner_contiguous(a.keys, "keys", 1));
  MLA_TRY(expect_same_device(a.cache.data, "cache", a.slots, "slots"));
  MLA_TRY(expect_same_device(a.cache.data, "cache", a.keys, "keys"));
  MLA_TRY(detail::expect_disjoint({{&a.cache.data, "cache"}},
                                  {{&a.keys, "keys"}, {&a.slots, "slots"}}));
  // Empty outputs: a no-op on every device (nothing to write, no launch).
  if (a.slots.shape[0] == 0) return Status::Ok();  // no tokens
  if (detail::on_cuda(a.keys.device)) {
    if (ctx.check_device_values) {  // the kernel skips a slot outside the pool; this names it
      detail::HostCopy sl;
      MLA_TRY(sl.copy(a.slots, "slots", ctx));
      MLA_TRY(detail::check_slot_values(sl.view(), "slots", a.cache.num_pages(), L::kPageTokens,
                                        /*allow_skip=*/true));
    }
    return MLA_CUDA_BACKEND(cuda::append_indexer_keys(a, ctx), "append_indexer_keys");
  }
  MLA_TRY(detail::check_slot_values(a.slots, "slots", a.cache.num_pages(), L::kPageTokens,
                                    /*allow_skip=*/true));
  return reference::append_indexer_keys(a);
}

Status quantize_indexer_query(const QuantizeIndexerQueryArgs& a, const ExecContext& ctx) {
  MLA_TRY(detail::expect_defined(a.q, "q"));
  MLA_TRY(detail::expect_known_device(a.q, "q"));
  const int n = a.q.ndim;
  if (n < 3 || a.q.shape[n - 2] != kIndexerHeads || a.q.shape[n - 1] != kIndexerDim)
    return error(Errc::invalid_shape, "q: shape {} does not match [T..., 64, 128]",
                 detail::shape_str(a.q));
  MLA_TRY(expect_dtype(a.q, "q", {DType::f32, DType::bf16}));
  // q8 has q's shape; weights and w_folded drop the last dim.
  for (auto [t, name, rank] : {std::tuple{&a.q8, "q8", n}, std::tuple{&a.weights, "weights", n - 1},
                               std::tuple{&a.w_folded, "w_folded", n - 1}}) {
    MLA_TRY(detail::expect_defined(*t, name));
    bool same = t->ndim == rank;
    for (int d = 0; same && d < rank; ++d) same = t->shape[d] == a.q.shape[d];
    if (!same)
      return error(Errc::invalid_shape, "{}: shape {} does not match q's {} {}", name,
                   detail::shape_str(*t), detail::shape_str(a.q),
                   rank == n ? "(same shape)" : "without its last dim");
    MLA_TRY(expect_same_device(a.q, "q", *t, name));
  }
  MLA_TRY(expect_dtype(a.q8, "q8", {DType::e4m3}));
  MLA_TRY(expect_dtype(a.weights, "weights", {DType::f32}));
  MLA_TRY(expect_dtype(a.w_folded, "w_folded", {DType::f32}));
  for (auto [t, name] : {std::pair{&a.q, "q"}, std::pair{&a.q8, "q8"},
                         std::pair{&a.weights, "weights"}, std::pair{&a.w_folded, "w_folded"}})
    MLA_TRY(expect_inner_contiguous(*t, name, 1));
  MLA_TRY(detail::expect_disjoint({{&a.q8, "q8"}, {&a.w_folded, "w_folded"}},
                                  {{&a.q, "q"}, {&a.weights, "weights"}}));
  // Empty outputs: a no-op on every device (nothing to write, no launch).
  if (a.q.numel() == 0) return Status::Ok();  // no tokens
  if (detail::on_cuda(a.q.device)) {
    return MLA_CUDA_BACKEND(cuda::quantize_indexer_query(a, ctx), "quantize_indexer_query");
  }
  return reference::quantize_indexer_query(a);
}

Status indexer_logits_decode(const IndexerLogitsDecodeArgs& a, const ExecContext& ctx) {
  MLA_TRY(expect_shape(a.q8, "q8", {kAny, kAny, kIndexerHeads, kIndexerDim}, "[B, s_q, 64, 128]"));
  MLA_TRY(detail::expect_known_device(a.q8, "q8"));
  const int64_t B = a.q8.shape[0], s_q = a.q8.shape[1];
  MLA_TRY(expect_dtype(a.q8, "q8", {DType::e4m3}));
  MLA_TRY(expect_shape(a.w_folded, "w_folded", {B, s_q, kIndexerHeads}, "[B, s_q, 64]"));
  MLA_TRY(expect_dtype(a.w_folded, "w_folded", {DType::f32}));
  MLA_TRY(validate_indexer_cache(a.cache, "cache"));
  MLA_TRY(detail::expect_block_table(a.block_table, a.cache_seqlens, B));
  MLA_TRY(expect_shape(a.logits, "logits", {B, s_q, kAny}, "[B, s_q, max_len]"));
  MLA_TRY(expect_dtype(a.logits, "logits", {DType::f32}));
  for (auto [t, name] :
       {std::pair{&a.q8, "q8"}, std::pair{&a.w_folded, "w_folded"},
        std::pair{&a.block_table, "block_table"}, std::pair{&a.cache_seqlens, "cache_seqlens"},
        std::pair{&a.logits, "logits"}, std::pair{&a.cache.data, "cache"}}) {
    MLA_TRY(expect_inner_contiguous(*t, name, 1));
    MLA_TRY(expect_same_device(a.q8, "q8", *t, name));
  }
  MLA_TRY(detail::expect_disjoint({{&a.logits, "logits"}}, {{&a.q8, "q8"},
                                                            {&a.w_folded, "w_folded"},
                                                            {&a.cache.data, "cache"},
                                                            {&a.block_table, "block_table"},
                                                            {&a.cache_seqlens, "cache_seqlens"}}));
  // Empty outputs: a no-op on every device (nothing to write, no launch).
  if (a.logits.numel() == 0) return Status::Ok();  // B, s_q or max_len 0
  const bool on_gpu = detail::on_cuda(a.q8.device);
  MLA_TRY(detail::check_values(on_gpu, a,
                               {{&IndexerLogitsDecodeArgs::block_table, "block_table"},
                                {&IndexerLogitsDecodeArgs::cache_seqlens, "cache_seqlens"}},
                               ctx, check_block_table));
  if (on_gpu) return MLA_CUDA_BACKEND(cuda::indexer_logits_decode(a, ctx), "indexer_logits_decode");
  return reference::indexer_logits_decode(a);
}

Status indexer_logits_prefill(const IndexerLogitsPrefillArgs& a, const ExecContext& ctx) {
  MLA_TRY(detail::validate_prefill_inputs(a));
  const int64_t T = a.q8.shape[0], N = a.k8.shape[0];
  MLA_TRY(expect_shape(a.logits, "logits", {T, N}, "[T, N]"));
  MLA_TRY(expect_dtype(a.logits, "logits", {DType::f32}));
  MLA_TRY(expect_inner_contiguous(a.logits, "logits", 1));
  MLA_TRY(expect_same_device(a.q8, "q8", a.logits, "logits"));
  MLA_TRY(detail::expect_disjoint({{&a.logits, "logits"}}, {{&a.q8, "q8"},
                                                            {&a.w_folded, "w_folded"},
                                                            {&a.k8, "k8"},
                                                            {&a.k_scale, "k_scale"},
                                                            {&a.k_start, "k_start"},
                                                            {&a.k_end, "k_end"}}));
  // Empty outputs: a no-op on every device (nothing to write, no launch).
  if (a.logits.numel() == 0) return Status::Ok();  // T or N 0
  const bool on_gpu = detail::on_cuda(a.q8.device);
  MLA_TRY(detail::check_values(on_gpu, a,
                               {{&IndexerLogitsPrefillArgs::k_start, "k_start"},
                                {&IndexerLogitsPrefillArgs::k_end, "k_end"}},
                               ctx, [&](const IndexerLogitsPrefillArgs& h) {
                                 return detail::check_key_ranges(h.k_start, h.k_end, N);
                               }));
  if (on_gpu)
    return MLA_CUDA_BACKEND(cuda::indexer_logits_prefill(a, ctx), "indexer_logits_prefill");
  return reference::indexer_logits_prefill(a);
}

}  // namespace mla
