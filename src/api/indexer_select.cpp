// Public entry point of the prefill select (mla/indexer.hpp): the indexer's
// prefill logits and the top-k of every row in one call. It validates with the
// pieces of indexer_logits_prefill and topk_indices, then runs the two CPU
// references (CPU tensors) or the CUDA select (cuda/indexer/indexer_select.hpp).
#include "mla/indexer_select.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "api/backend.hpp"
#include "api/device_values.hpp"
#include "api/indexer_checks.hpp"
#include "api/topk_checks.hpp"
#ifdef MLA_HAS_CUDA
#include "cuda/indexer/indexer_cuda.hpp"
#endif
#include "common/checked.hpp"
#include "common/validate.hpp"
#include "reference/indexer_ref.hpp"
#include "reference/topk_ref.hpp"

namespace mla {

using detail::error;

namespace {

const char* path_name(IndexerSelectPath p) {
  switch (p) {
    case IndexerSelectPath::automatic: return "automatic";
    case IndexerSelectPath::unfused: return "unfused";
    case IndexerSelectPath::fused: return "fused";
  }
  return "?";
}

// The logits call of the same inputs (logits left undefined).
IndexerLogitsPrefillArgs logits_args(const IndexerSelectPrefillArgs& a) {
  return {a.q8, a.w_folded, a.k8, a.k_scale, a.k_start, a.k_end, {}};
}

Status validate(const IndexerSelectPrefillArgs& a, const IndexerSelectOptions& o) {
  MLA_TRY(detail::validate_prefill_inputs(logits_args(a)));
  MLA_TRY(detail::validate_topk_k_order(a.k, a.order));
  MLA_TRY(detail::validate_topk_indices(a.indices, a.q8.shape[0], a.k, "[T, k]", a.q8, "q8"));
  if (o.path != IndexerSelectPath::automatic && o.path != IndexerSelectPath::unfused &&
      o.path != IndexerSelectPath::fused)
    return error(Errc::invalid_value,
                 "opts.path = {} is not an IndexerSelectPath (automatic, unfused or fused)",
                 static_cast<int>(o.path));
  if (o.capacity < 0 || o.capacity > std::numeric_limits<int32_t>::max())
    return error(Errc::invalid_value,
                 "opts.capacity = {} is not allowed: 0 (the default, 8 k) or entries per row in "
                 "[1, 2^31 - 1]",
                 o.capacity);
  return detail::expect_disjoint({{&a.indices, "indices"}}, {{&a.q8, "q8"},
                                                             {&a.w_folded, "w_folded"},
                                                             {&a.k8, "k8"},
                                                             {&a.k_scale, "k_scale"},
                                                             {&a.k_start, "k_start"},
                                                             {&a.k_end, "k_end"}});
}

// The CPU path: the two references one after the other, the logits in a temporary.
Status run_reference(const IndexerSelectPrefillArgs& a) {
  const int64_t T = a.q8.shape[0], N = a.k8.shape[0];
  int64_t count = 0;
  if (!detail::mul_ok(T, N, &count))
    return error(Errc::invalid_shape, "q8, k8: T * N = {} * {} logits do not fit 64 bits", T, N);
  std::vector<float> logits(static_cast<size_t>(std::max<int64_t>(count, 1)));
  IndexerLogitsPrefillArgs l = logits_args(a);
  l.logits = TensorView::make(logits.data(), DType::f32, {T, N});
  MLA_TRY(reference::indexer_logits_prefill(l));
  TopkArgs t;
  t.logits = l.logits;
  t.k = a.k;
  t.order = a.order;
  t.indices = a.indices;
  return reference::topk_indices(t);
}

// The scratch bytes of validated arguments (the public size and the call
// share it, so a call validates once).
Status workspace_need(const IndexerSelectPrefillArgs& a, const IndexerSelectOptions& o,
                      size_t* bytes) {
  *bytes = 0;
  if (!detail::on_cuda(a.q8.device)) return Status::Ok();  // the reference needs no scratch
  if (a.indices.numel() == 0) return Status::Ok();         // T = 0 runs nothing
  return MLA_CUDA_BACKEND(cuda::indexer_select_prefill_workspace_size(a, o, bytes),
                          "indexer_select_prefill_workspace_size");
}

}  // namespace

Status indexer_select_prefill_workspace_size(const IndexerSelectPrefillArgs& a,
                                             const IndexerSelectOptions& o, size_t* bytes) {
  if (bytes == nullptr) return error(Errc::invalid_value, "bytes: output pointer is null");
  *bytes = 0;
  // Sizing reads shapes only: the caller may size before it owns the buffers.
  IndexerSelectPrefillArgs s = a;
  for (TensorView* t : {&s.q8, &s.w_folded, &s.k8, &s.k_scale, &s.k_start, &s.k_end, &s.indices})
    *t = detail::shape_only(*t);
  MLA_TRY(validate(s, o));
  return workspace_need(s, o, bytes);
}

Status indexer_select_prefill(const IndexerSelectPrefillArgs& a, const IndexerSelectOptions& o,
                              Workspace ws, const ExecContext& ctx) {
  MLA_TRY(validate(a, o));
  // Empty outputs: a no-op on every device (nothing to write, no launch).
  if (a.indices.numel() == 0) return Status::Ok();  // T = 0
  const int64_t N = a.k8.shape[0];
  const bool on_gpu = detail::on_cuda(a.q8.device);
  MLA_TRY(detail::check_values(on_gpu, a,
                               {{&IndexerSelectPrefillArgs::k_start, "k_start"},
                                {&IndexerSelectPrefillArgs::k_end, "k_end"}},
                               ctx, [&](const IndexerSelectPrefillArgs& h) {
                                 return detail::check_key_ranges(h.k_start, h.k_end, N);
                               }));
  if (!on_gpu) return run_reference(a);
  size_t need = 0;
  MLA_TRY(workspace_need(a, o, &need));
  if (need > 0 && (ws.data == nullptr || ws.bytes < need))
    return error(Errc::insufficient_workspace,
                 "workspace: {} bytes given{}, the {} path of indexer_select_prefill needs {} "
                 "bytes (indexer_select_prefill_workspace_size)",
                 ws.data == nullptr ? 0 : ws.bytes, ws.data == nullptr ? " (null)" : "",
                 path_name(o.path), need);
  MLA_TRY(detail::expect_workspace_disjoint(ws.data, ws.bytes, a.q8.device,
                                            {{&a.q8, "q8"},
                                             {&a.w_folded, "w_folded"},
                                             {&a.k8, "k8"},
                                             {&a.k_scale, "k_scale"},
                                             {&a.k_start, "k_start"},
                                             {&a.k_end, "k_end"},
                                             {&a.indices, "indices"}}));
  return MLA_CUDA_BACKEND(cuda::indexer_select_prefill(a, o, ws, ctx), "indexer_select_prefill");
}

}  // namespace mla
