// The prefill select's two paths (indexer_select.hpp): the workspace, the
// unfused pipeline, and the fused one with its fallback for rows whose
// candidate buffer overflowed.
#include "cuda/indexer/indexer_select.hpp"

#include <algorithm>
#include <vector>

#include "cuda/common/cuda_status.hpp"
#include "cuda/topk/topk_params.hpp"
#include "mla/topk.hpp"

namespace mla::cuda::indexer {
namespace {

constexpr size_t kAlign = 256;
size_t round_up(size_t n) {
  return (n + kAlign - 1) / kAlign * kAlign;
}

// The workspace's pieces, carved in order from a 256-byte aligned base.
struct Carve {
  uint8_t* base;
  size_t used = 0;
  template <class T>
  T* take(int64_t count) {
    T* p = base ? reinterpret_cast<T*>(base + used) : nullptr;
    used += round_up(size_t(std::max<int64_t>(count, 1)) * sizeof(T));
    return p;
  }
};

int64_t capacity_of(const PrefillSelectParams& p, const SelectOptions& opt) {
  return opt.capacity > 0 ? opt.capacity : kDefaultCapacityPerK * p.k;
}
int64_t fallback_rows_of(const PrefillSelectParams& p, const SelectOptions& opt) {
  const int64_t f = opt.fallback_rows > 0 ? opt.fallback_rows : kDefaultFallbackRows;
  return std::max<int64_t>(1, std::min(f, p.idx.num_tokens));
}

// The fused path's pieces.
struct FusedWs {
  CandidateArgs cand;
  uint8_t* q8;  // fallback chunk: gathered queries [F][8192]
  float* w;     // [F][64]
  int32_t *ks, *ke;
  float* logits;  // [F][N]
  int32_t* out;   // [F][k]
};
FusedWs carve_fused(const PrefillSelectParams& p, const SelectOptions& opt, Carve& c) {
  const int64_t T = p.idx.num_tokens, N = p.idx.num_keys, cap = capacity_of(p, opt),
                F = fallback_rows_of(p, opt);
  FusedWs f;
  f.cand.cap = cap;
  f.cand.k = uint32_t(p.k);
  f.cand.logits = c.take<float>(T * cap);
  f.cand.pos = c.take<int32_t>(T * cap);
  f.cand.counts = c.take<int32_t>(T);
  f.cand.over_rows = c.take<int32_t>(T);
  f.cand.over_n = c.take<int32_t>(1);
  f.q8 = c.take<uint8_t>(F * kIndexerHeads * kIndexerDim);
  f.w = c.take<float>(F * kIndexerHeads);
  f.ks = c.take<int32_t>(F);
  f.ke = c.take<int32_t>(F);
  f.logits = c.take<float>(F * N);
  f.out = c.take<int32_t>(F * p.k);
  return f;
}

// The top-k of `rows` rows of `width` logits (lengths optional) into out.
// CandidateTopk::resident (over the candidate buffers): the resident kernel
// where it fits: a buffer holds fewer than 8k entries, where the sieve that
// choose() plans for full rows refuses and its chunk loop may compact; the
// resident kernel reads a row into shared memory once. Measured 2026-12-06
// (H100, 4096 buffers of ~8.4K / ~12.3K entries): ~370 / ~460 us, and ~60-75
// us more with choose()'s plan.
Status run_topk(const float* logits, int64_t rows, int64_t width, const int32_t* lengths,
                const PrefillSelectParams& p, int32_t* out, int64_t out_stride, cudaStream_t stream,
                CandidateTopk how = CandidateTopk::choose) {
  topk::TopkParams t;
  t.logits = logits, t.logits_stride = width, t.num_rows = rows, t.width = width, t.k = p.k;
  t.lengths = lengths, t.out = out, t.out_stride = out_stride, t.best_first = p.best_first;
  const int sms = current_sm_count();
  topk::TopkPlan plan = topk::choose(rows, width, p.k, sms);
  if (how == CandidateTopk::resident && p.k <= topk::max_k(topk::Kernel::resident_512) &&
      rows >= sms && topk::fits(topk::Kernel::resident_512, width, 1))
    plan = topk::TopkPlan{topk::Kernel::resident_512, 1, false};
  t.l2_prefetch = plan.l2_prefetch;
  return topk::launch_topk(t, plan.kernel, plan.cluster, stream);
}

IndexerLogitsParams logits_params(const PrefillSelectParams& p, float* logits) {
  IndexerLogitsParams q = p.idx;
  q.paged = false;
  q.width = q.num_keys;
  q.logits = logits;
  q.logits_stride = q.num_keys;
  return q;
}

// Rows list[0..n) through the unfused path, `chunk` rows at a time.
Status fallback(const PrefillSelectParams& p, const FusedWs& f, int64_t n, int64_t chunk,
                cudaStream_t stream) {
  const IndexerLogitsParams& x = p.idx;
  constexpr int64_t kQ = kIndexerHeads * kIndexerDim;
  for (int64_t r0 = 0; r0 < n; r0 += chunk) {
    const int64_t m = std::min(chunk, n - r0);
    const int32_t* list = f.cand.over_rows + r0;
    MLA_TRY(launch_copy_rows(f.q8, kQ, x.q, x.q_stride, kQ, list, m, false, stream));
    MLA_TRY(launch_copy_rows(f.w, kIndexerHeads * 4, x.w, x.w_stride * 4, kIndexerHeads * 4, list,
                             m, false, stream));
    MLA_TRY(launch_copy_rows(f.ks, 4, x.ks, 4, 4, list, m, false, stream));
    MLA_TRY(launch_copy_rows(f.ke, 4, x.ke, 4, 4, list, m, false, stream));
    IndexerLogitsParams q = logits_params(p, f.logits);
    q.q = f.q8, q.q_stride = kQ, q.w = f.w, q.w_stride = kIndexerHeads, q.ks = f.ks, q.ke = f.ke;
    q.num_tokens = m;
    MLA_TRY(launch_indexer_logits_flat_wgmma(q, stream, {}));
    MLA_TRY(run_topk(f.logits, m, x.num_keys, nullptr, p, f.out, p.k, stream));
    MLA_TRY(launch_copy_rows(p.out, p.out_stride * 4, f.out, int64_t(p.k) * 4, int64_t(p.k) * 4,
                             list, m, true, stream));
  }
  return Status::Ok();
}

}  // namespace

size_t prefill_select_workspace(const PrefillSelectParams& p, const SelectOptions& opt) {
  Carve c{nullptr};
  if (opt.path == SelectPath::fused)
    carve_fused(p, opt, c);
  else
    c.take<float>(p.idx.num_tokens * p.idx.num_keys);
  return c.used + kAlign;
}

Status prefill_select(const PrefillSelectParams& p, const SelectOptions& opt, void* workspace,
                      size_t workspace_bytes, cudaStream_t stream, SelectStats* stats) {
  if (stats) *stats = {};
  if (p.k < kTopkGranule || p.k > kTopkMax || p.k % kTopkGranule)
    return value_error(Errc::invalid_value, "prefill select: k", p.k,
                       "must be a multiple of 64 in [64, 8192]");
  if (p.idx.paged)
    return value_error(Errc::unsupported, "prefill select: paged keys", 1,
                       "are the decode form; the select takes flat keys");
  if (p.idx.num_keys > (int64_t(1) << 31) - 4)
    return value_error(Errc::unsupported, "prefill select: keys", p.idx.num_keys,
                       "do not fit the i32 positions");
  if (opt.path == SelectPath::fused &&
      (capacity_of(p, opt) > INT32_MAX || capacity_of(p, opt) * p.idx.num_tokens > UINT32_MAX))
    return value_error(Errc::invalid_value, "prefill select: capacity", capacity_of(p, opt),
                       "is past 2^31 - 1 entries per row or 2^32 - 1 over the rows");
  const size_t need = prefill_select_workspace(p, opt);
  if (workspace_bytes < need)
    return value_error(Errc::insufficient_workspace, "prefill select: workspace bytes",
                       (long long)workspace_bytes, "are fewer than prefill_select_workspace()");
  if (p.idx.num_tokens == 0) return Status::Ok();
  if (p.idx.num_keys == 0) {  // no candidates: every row is -1 (0xff bytes)
    MLA_CUDA_TRY(cudaMemset2DAsync(p.out, size_t(p.out_stride) * 4, 0xff, size_t(p.k) * 4,
                                   size_t(p.idx.num_tokens), stream),
                 "cudaMemset2DAsync(prefill select, no keys)");
    return Status::Ok();
  }
  auto* base = static_cast<uint8_t*>(workspace);
  base += (kAlign - reinterpret_cast<uintptr_t>(base) % kAlign) % kAlign;
  Carve c{base};
  const int64_t T = p.idx.num_tokens, N = p.idx.num_keys;

  if (opt.path == SelectPath::unfused) {
    float* logits = c.take<float>(T * N);
    MLA_TRY(launch_indexer_logits_flat_wgmma(logits_params(p, logits), stream, {}));
    return run_topk(logits, T, N, nullptr, p, p.out, p.out_stride, stream);
  }

  const FusedWs f = carve_fused(p, opt, c);
  MLA_TRY(launch_prefill_candidates(logits_params(p, nullptr), f.cand, stream));
  MLA_TRY(run_topk(f.cand.logits, T, f.cand.cap, f.cand.counts, p, p.out, p.out_stride, stream,
                   opt.candidate_topk));
  MLA_TRY(launch_gather_positions(p.out, p.out_stride, T, p.k, f.cand.pos, f.cand.cap, stream));
  // The one read back: how many rows overflowed (the fallback's launches depend on it).
  int32_t over = 0;
  MLA_CUDA_TRY(cudaMemcpyAsync(&over, f.cand.over_n, sizeof over, cudaMemcpyDeviceToHost, stream),
               "cudaMemcpyAsync(overflow count)");
  MLA_CUDA_TRY(cudaStreamSynchronize(stream), "cudaStreamSynchronize(prefill select)");
  if (stats) {
    stats->overflow_rows = over;
    std::vector<int32_t> counts(size_t(T), 0);
    MLA_CUDA_TRY(cudaMemcpy(counts.data(), f.cand.counts, size_t(T) * 4, cudaMemcpyDeviceToHost),
                 "cudaMemcpy(kept counts)");
    for (int32_t n : counts)
      stats->max_kept = std::max<int64_t>(stats->max_kept, n), stats->total_kept += n;
  }
  return fallback(p, f, over, fallback_rows_of(p, opt), stream);
}

}  // namespace mla::cuda::indexer
