// The indexer's CUDA backends: validated API arguments -> kernel params, and
// the choice of the logits kernel. Layout demands the kernels make beyond the
// API's checks (dense inner dims, 16-byte alignment of the rows they load with
// vector instructions) are checked here and answered with a Status naming the
// argument.
#include "cuda/indexer/indexer_cuda.hpp"

#include <cstdint>

#include "common/validate.hpp"
#include "cuda/indexer/indexer_select.hpp"

namespace mla::cuda {
namespace indexer {

Status launch_indexer_logits(const IndexerLogitsParams& p, cudaStream_t stream,
                             const LogitsOptions& opt) {
  const Kernel want = choose_kernel(p);
  const Kernel k = opt.kernel.value_or(want);
  if (serves_paged(k) != p.paged)
    return detail::error(
        Errc::unsupported, "indexer logits: kernel {} does not serve {} keys (kernel {} does)",
        kernel_name(k), want == Kernel::paged_tma_wgmma ? "paged" : "flat", kernel_name(want));
  switch (k) {
    case Kernel::paged_tma_wgmma: return launch_indexer_logits_paged(p, stream, opt);
    case Kernel::flat_tma_wgmma: return launch_indexer_logits_flat_wgmma(p, stream, opt);
  }
  return detail::error(Errc::invalid_value, "indexer logits: kernel {} is not a Kernel", int(k));
}

}  // namespace indexer

using detail::error;
namespace k = mla::cuda::indexer;

namespace {

cudaStream_t stream_of(const ExecContext& ctx) {
  return static_cast<cudaStream_t>(ctx.stream);
}

// Stride (elements) of the leading dims [0, lead) seen as one row dim; the
// leading dims must nest (row-major over themselves).
Status row_stride(const TensorView& t, const char* name, int lead, int64_t* rows, int64_t* stride) {
  *rows = 1;
  for (int d = 0; d < lead; ++d) *rows *= t.shape[d];
  *stride = lead > 0 ? t.strides[lead - 1] : 0;
  for (int d = 0; d + 1 < lead; ++d)
    if (t.shape[d] > 1 && t.strides[d] != t.strides[d + 1] * t.shape[d + 1])
      return error(Errc::invalid_stride,
                   "{}: the CUDA kernels need its leading dims {} to nest (stride of dim {} is {}, "
                   "expected {})",
                   name, detail::shape_str(t), d, t.strides[d], t.strides[d + 1] * t.shape[d + 1]);
  return Status::Ok();
}

k::IndexerCachePtr cache_ptr(const IndexerCacheView& c) {
  k::IndexerCachePtr p;
  p.base = static_cast<uint8_t*>(c.data.data);
  p.page_stride = c.data.shape[0] > 1 ? c.data.strides[0] : IndexerCacheLayout::kPageBytes;
  p.page_size = IndexerCacheLayout::kPageTokens;
  p.num_pages = c.data.shape[0];
  return p;
}

}  // namespace

Status append_indexer_keys(const AppendIndexerKeysArgs& a, const ExecContext& ctx) {
  k::IndexerAppendParams p;
  p.keys = a.keys.data;
  p.key_is_bf16 = a.keys.dtype == DType::bf16;
  p.key_row_stride = a.keys.shape[0] > 1 ? a.keys.strides[0] : kIndexerDim;
  // Each lane loads 4 values: 8 bytes (bf16) or 16 (f32).
  MLA_TRY(detail::expect_aligned(a.keys, "keys", p.key_is_bf16 ? 8 : 16));
  MLA_TRY(detail::expect_aligned(a.cache.data, "cache", 16));
  p.slots = static_cast<const int64_t*>(a.slots.data);
  p.num_tokens = a.slots.shape[0];
  p.cache = cache_ptr(a.cache);
  return k::launch_indexer_append(p, stream_of(ctx));
}

Status quantize_indexer_query(const QuantizeIndexerQueryArgs& a, const ExecContext& ctx) {
  const int lead = a.q.ndim - 2;
  k::IndexerQueryParams p;
  int64_t rows = 0, rows2 = 0;
  MLA_TRY(row_stride(a.q, "q", lead, &rows, &p.q_row_stride));
  MLA_TRY(row_stride(a.q8, "q8", lead, &rows2, &p.q8_row_stride));
  MLA_TRY(row_stride(a.weights, "weights", lead, &rows2, &p.w_row_stride));
  MLA_TRY(row_stride(a.w_folded, "w_folded", lead, &rows2, &p.wf_row_stride));
  p.q = a.q.data;
  p.q_is_bf16 = a.q.dtype == DType::bf16;
  p.q_head_stride = a.q.strides[lead];
  p.q8 = static_cast<uint8_t*>(a.q8.data);
  p.q8_head_stride = a.q8.strides[lead];
  p.weights = static_cast<const float*>(a.weights.data);
  p.w_folded = static_cast<float*>(a.w_folded.data);
  p.rows = rows;
  MLA_TRY(detail::expect_aligned(a.q, "q", p.q_is_bf16 ? 8 : 16));
  MLA_TRY(detail::expect_aligned(a.q8, "q8", 4));
  return k::launch_indexer_query(p, stream_of(ctx));
}

namespace {
// q8 [T, 64, 128] and w [T, 64] as token rows (heads and dims dense).
Status query_rows(const TensorView& q8, const TensorView& w, int lead, k::IndexerLogitsParams* p) {
  int64_t rows = 0, rows2 = 0;
  MLA_TRY(row_stride(q8, "q8", lead, &rows, &p->q_stride));
  MLA_TRY(row_stride(w, "w_folded", lead, &rows2, &p->w_stride));
  if (q8.strides[lead] != kIndexerDim || q8.strides[lead + 1] != 1)
    return error(Errc::invalid_stride,
                 "q8: the CUDA kernel needs heads and dims dense ([..., 64, 128] row-major)");
  MLA_TRY(detail::expect_aligned(q8, "q8", 16));
  if (p->q_stride % 16)
    return error(Errc::misaligned, "q8: token stride {} B is not a multiple of 16", p->q_stride);
  if (w.strides[lead] != 1) return error(Errc::invalid_stride, "w_folded: heads must be dense");
  p->q = static_cast<const uint8_t*>(q8.data);
  p->w = static_cast<const float*>(w.data);
  p->num_tokens = rows;
  return Status::Ok();
}
}  // namespace

Status indexer_logits_decode(const IndexerLogitsDecodeArgs& a, const ExecContext& ctx,
                             const indexer::LogitsOptions& opt) {
  k::IndexerLogitsParams p;
  MLA_TRY(query_rows(a.q8, a.w_folded, 2, &p));
  p.paged = true;
  p.batch = int(a.q8.shape[0]);
  p.s_q = int(a.q8.shape[1]);
  p.seqlens = static_cast<const int32_t*>(a.cache_seqlens.data);
  p.block_table = static_cast<const int32_t*>(a.block_table.data);
  p.block_table_stride = a.block_table.strides[0];
  p.max_pages = a.block_table.shape[1];
  p.cache = cache_ptr(a.cache);
  MLA_TRY(detail::expect_aligned(a.cache.data, "cache", 16));
  p.width = a.logits.shape[2];
  if (a.logits.shape[1] > 1 && a.logits.strides[0] != a.logits.strides[1] * a.logits.shape[1])
    return error(Errc::invalid_stride, "logits: the CUDA kernel needs [B, s_q] to nest");
  p.logits = static_cast<float*>(a.logits.data);
  p.logits_stride = a.logits.strides[1];
  return k::launch_indexer_logits(p, stream_of(ctx), opt);
}

namespace {
// The prefill form's inputs (queries, flat keys, key ranges) into p; the
// caller sets the logits.
Status flat_inputs(const IndexerLogitsPrefillArgs& a, k::IndexerLogitsParams* p) {
  MLA_TRY(query_rows(a.q8, a.w_folded, 1, p));
  if (a.k8.shape[0] > 1 && a.k8.strides[0] != kIndexerDim)
    return error(Errc::invalid_stride, "k8: the CUDA kernel needs dense rows of 128 (stride {})",
                 a.k8.strides[0]);
  MLA_TRY(detail::expect_aligned(a.k8, "k8", 16));
  MLA_TRY(detail::expect_aligned(a.k_scale, "k_scale", 4));
  if (a.k_scale.shape[0] > 1 && a.k_scale.strides[0] != 1)
    return error(Errc::invalid_stride, "k_scale: must be dense");
  p->flat_keys = static_cast<const uint8_t*>(a.k8.data);
  p->flat_scales = static_cast<const float*>(a.k_scale.data);
  p->num_keys = a.k8.shape[0];
  p->ks = static_cast<const int32_t*>(a.k_start.data);
  p->ke = static_cast<const int32_t*>(a.k_end.data);
  if (a.k_start.shape[0] > 1 && (a.k_start.strides[0] != 1 || a.k_end.strides[0] != 1))
    return error(Errc::invalid_stride, "k_start / k_end: must be dense");
  return Status::Ok();
}

// The internal select's params and options of a validated public call.
Status select_params(const IndexerSelectPrefillArgs& a, const IndexerSelectOptions& o,
                     k::PrefillSelectParams* p, k::SelectOptions* opt) {
  MLA_TRY(flat_inputs({a.q8, a.w_folded, a.k8, a.k_scale, a.k_start, a.k_end, {}}, &p->idx));
  MLA_TRY(detail::expect_aligned(a.indices, "indices", 4));
  p->k = a.k;
  p->out = static_cast<int32_t*>(a.indices.data);
  p->out_stride = a.indices.shape[0] > 1 ? a.indices.strides[0] : a.k;
  p->best_first = a.order == TopkOrder::best_first;
  // automatic: unfused, the faster path measured (mla/indexer.hpp).
  opt->path = o.path == IndexerSelectPath::fused ? k::SelectPath::fused : k::SelectPath::unfused;
  opt->capacity = o.capacity;
  return Status::Ok();
}
}  // namespace

Status indexer_logits_prefill(const IndexerLogitsPrefillArgs& a, const ExecContext& ctx,
                              const indexer::LogitsOptions& opt) {
  k::IndexerLogitsParams p;
  MLA_TRY(flat_inputs(a, &p));
  p.width = a.logits.shape[1];
  p.logits = static_cast<float*>(a.logits.data);
  p.logits_stride = a.logits.strides[0];
  return k::launch_indexer_logits(p, stream_of(ctx), opt);
}

Status indexer_select_prefill_workspace_size(const IndexerSelectPrefillArgs& a,
                                             const IndexerSelectOptions& o, size_t* bytes) {
  k::PrefillSelectParams p;
  k::SelectOptions opt;
  MLA_TRY(select_params(a, o, &p, &opt));
  *bytes = k::prefill_select_workspace(p, opt);
  return Status::Ok();
}

Status indexer_select_prefill(const IndexerSelectPrefillArgs& a, const IndexerSelectOptions& o,
                              Workspace ws, const ExecContext& ctx) {
  k::PrefillSelectParams p;
  k::SelectOptions opt;
  MLA_TRY(select_params(a, o, &p, &opt));
  return k::prefill_select(p, opt, ws.data, ws.bytes, stream_of(ctx));
}

}  // namespace mla::cuda
