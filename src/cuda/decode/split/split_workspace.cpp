// Workspace layout of the split-KV schedule (split.hpp).
#include <algorithm>

#include "common/validate.hpp"
#include "cuda/decode/split/split.hpp"

namespace mla::cuda::split {

namespace {
size_t align_up(size_t x) {
  return (x + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
}
}  // namespace

WorkspaceLayout workspace_layout(int64_t B, int64_t rows, int64_t P, bool batch_invariant,
                                 bool token_lengths) {
  WorkspaceLayout L;
  L.max_pieces = batch_invariant ? B * kInvariantMaxSplits : B + P;
  // Balanced mode gives partial slots only to split requests, and a request is
  // split only where one of the P - 1 span boundaries falls inside its cost run
  // (split_schedule.cu): the split requests hold at most P - 1 of them plus
  // one piece each, < 2P slots at any B. Without this bound the fp32 partials
  // grow with B (sparse prefill: 4096 tokens x 128 heads = 1 GiB for B + P).
  L.max_slots = batch_invariant ? L.max_pieces : std::min(L.max_pieces, 2 * P);
  size_t off = 0;
  L.pieces = off;
  off = align_up(off + sizeof(Piece) * L.max_pieces);
  L.piece_pos = off;
  off = align_up(off + sizeof(int64_t) * L.max_pieces);
  L.req_pos = off;
  off = align_up(off + sizeof(int64_t) * B);
  L.req_split = off;
  off = align_up(off + sizeof(RequestSplit) * B);
  L.worker_begin = off;
  off = align_up(off + sizeof(int32_t) * (P + 1));
  if (token_lengths) {
    L.token_len = off;
    off = align_up(off + sizeof(int32_t) * B);
  }
  L.plan_bytes = off;
  L.partial_lse = off;
  off = align_up(off + sizeof(float) * L.max_slots * rows);
  L.partial_out = off;
  off = align_up(off + sizeof(float) * L.max_slots * rows * decode::kDv);
  L.total = off;
  return L;
}

Status check_plan(const DecodePlan& plan, const WorkspaceLayout& L, int64_t num_workers,
                  const char* what) {
  if (plan.num_workers != num_workers || plan.bytes != L.plan_bytes)
    return detail::error(Errc::invalid_value,
                         "{}: made for {} workers and {} schedule bytes, this call has {} and {}",
                         what, plan.num_workers, plan.bytes, num_workers, L.plan_bytes);
  if (reinterpret_cast<uintptr_t>(plan.data) % kWorkspaceAlign != 0)
    return detail::error(Errc::misaligned, "{}: data {} must be {}-byte aligned", what, plan.data,
                         kWorkspaceAlign);
  return Status::Ok();
}

void bind_workspace(decode::DecodeParams* p, const WorkspaceLayout& L, void* workspace,
                    const void* plan) {
  auto* base = static_cast<uint8_t*>(workspace);
  // The schedule regions: in the plan when one is given (read-only then: the
  // schedule kernel does not run), else in the workspace's own prefix.
  auto* sched = plan != nullptr ? static_cast<uint8_t*>(const_cast<void*>(plan)) : base;
  p->max_pieces = L.max_pieces;
  p->pieces = reinterpret_cast<Piece*>(sched + L.pieces);
  p->piece_pos = reinterpret_cast<int64_t*>(sched + L.piece_pos);
  p->req_pos = reinterpret_cast<int64_t*>(sched + L.req_pos);
  p->req_split = reinterpret_cast<RequestSplit*>(sched + L.req_split);
  p->worker_begin = reinterpret_cast<int32_t*>(sched + L.worker_begin);
  p->partial_lse = reinterpret_cast<float*>(base + L.partial_lse);
  p->partial_out = reinterpret_cast<float*>(base + L.partial_out);
  if (L.token_len != 0) p->token_len = reinterpret_cast<int32_t*>(sched + L.token_len);
}

}  // namespace mla::cuda::split
