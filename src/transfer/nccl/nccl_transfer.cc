// The NCCL executor of a TransferPlan (libmla_transfer_nccl; host side, the
// kernel is copy_pieces.cu). Both ends walk the same wire schedule
// (transfer/schedule.hpp): per round one NCCL group holding the round's direct
// runs (straight from/into the cache pages) and, when it has small runs, one
// message of them packed into the staging buffer. Everything is enqueued on
// the caller's stream; nothing here synchronises.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstdint>
#include <string_view>

#include "common/validate.hpp"
#include "cuda/common/cuda_status.hpp"
#include "mla/transfer.hpp"
#include "transfer/nccl/copy_pieces.hpp"
#include "transfer/nccl/nccl_status.hpp"
#include "transfer/schedule.hpp"

namespace mla {
namespace {

using detail::error;
using transfer::Piece;
using transfer::Round;
using transfer::Schedule;

Status check_options(const TransferPlan& plan, const NcclTransferOptions& o) {
  if (o.comm == nullptr) return error(Errc::invalid_value, "options.comm is null");
  if (o.peer < 0) return error(Errc::invalid_value, "options.peer = {} is negative", o.peer);
  const size_t groups = plan.layer_begin.empty() ? 0 : plan.layer_begin.size() - 1;
  const std::pair<std::span<void* const>, const char*> lists[] = {{o.layer_ready, "layer_ready"},
                                                                  {o.layer_done, "layer_done"}};
  for (const auto& [events, name] : lists)
    if (!events.empty() && events.size() != groups)
      return error(Errc::invalid_shape,
                   "options.{} has {} events, the plan has {} layer groups (one event each)", name,
                   events.size(), groups);
  if (o.staging.bytes > 0 && reinterpret_cast<uintptr_t>(o.staging.data) % 16 != 0)
    return error(Errc::misaligned, "options.staging.data = {} is not 16-byte aligned",
                 o.staging.data);
  if (o.staging.bytes > 0 && o.staging.data == nullptr)
    return error(Errc::invalid_value, "options.staging.data is null with bytes = {}",
                 o.staging.bytes);
  return Status::Ok();
}

// Where run i starts on this side.
Status run_address(const TransferPlan& plan, const TransferBuffers& b, size_t i, const char* side,
                   char** out) {
  void* base;
  MLA_TRY(transfer::run_base(b, plan.runs[i], side, &base));
  const bool is_src = std::string_view(side) == "src";
  *out = static_cast<char*>(base) + (is_src ? plan.runs[i].src_offset : plan.runs[i].dst_offset);
  return Status::Ok();
}

// Pack (send) or unpack (recv) a round's staged pieces.
Status stage(const TransferPlan& plan, const TransferBuffers& b, const Round& r, bool send,
             const NcclTransferOptions& o) {
  std::vector<Piece> pieces;
  pieces.reserve(r.staged.size());
  char* staging = static_cast<char*>(o.staging.data);
  for (const auto& sp : r.staged) {
    char* cache;
    MLA_TRY(run_address(plan, b, sp.run, send ? "src" : "dst", &cache));
    char* st = staging + sp.staging_offset;
    pieces.push_back(send ? Piece{cache, st, plan.runs[sp.run].bytes}
                          : Piece{st, cache, plan.runs[sp.run].bytes});
  }
  return cuda::cuda_status(transfer::launch_copy_pieces(pieces.data(), pieces.size(),
                                                        static_cast<cudaStream_t>(o.stream)),
                           "copy_pieces_kernel (staging pack/unpack)");
}

Status run_schedule(const TransferPlan& plan, const TransferBuffers& b,
                    const NcclTransferOptions& o, bool send) {
  MLA_TRY(check_options(plan, o));
  Schedule s;
  MLA_TRY(transfer::build_schedule(plan, o.direct_min_bytes, o.staging.bytes, &s));
  const char* side = send ? "src" : "dst";
  // Resolve every address first: a bad base is an error before anything is enqueued.
  for (size_t i = 0; i < plan.runs.size(); ++i) {
    char* a;
    MLA_TRY(run_address(plan, b, i, side, &a));
  }
  auto stream = static_cast<cudaStream_t>(o.stream);
  auto comm = static_cast<ncclComm_t>(o.comm);
  for (size_t k = 0; k < s.rounds.size(); ++k) {
    const Round& r = s.rounds[k];
    const bool first_of_group = k == 0 || s.rounds[k - 1].group != r.group;
    const bool last_of_group = k + 1 == s.rounds.size() || s.rounds[k + 1].group != r.group;
    if (send && first_of_group && !o.layer_ready.empty())
      MLA_CUDA_TRY(cudaStreamWaitEvent(stream, static_cast<cudaEvent_t>(o.layer_ready[r.group])),
                   "cudaStreamWaitEvent(layer_ready)");
    if (send && !r.staged.empty()) MLA_TRY(stage(plan, b, r, true, o));
    MLA_NCCL_TRY(ncclGroupStart(), "ncclGroupStart");
    for (size_t i : r.direct) {
      char* a;
      MLA_TRY(run_address(plan, b, i, side, &a));
      const size_t n = static_cast<size_t>(plan.runs[i].bytes);
      if (send)
        MLA_NCCL_TRY(ncclSend(a, n, ncclChar, o.peer, comm, stream), "ncclSend");
      else
        MLA_NCCL_TRY(ncclRecv(a, n, ncclChar, o.peer, comm, stream), "ncclRecv");
    }
    if (!r.staged.empty()) {
      const size_t n = static_cast<size_t>(r.staged_bytes);
      if (send)
        MLA_NCCL_TRY(ncclSend(o.staging.data, n, ncclChar, o.peer, comm, stream), "ncclSend");
      else
        MLA_NCCL_TRY(ncclRecv(o.staging.data, n, ncclChar, o.peer, comm, stream), "ncclRecv");
    }
    MLA_NCCL_TRY(ncclGroupEnd(), "ncclGroupEnd");
    if (!send && !r.staged.empty()) MLA_TRY(stage(plan, b, r, false, o));
    if (!send && last_of_group && !o.layer_done.empty())
      MLA_CUDA_TRY(cudaEventRecord(static_cast<cudaEvent_t>(o.layer_done[r.group]), stream),
                   "cudaEventRecord(layer_done)");
  }
  // Groups with no runs (a layer with 0 tokens) still get their event.
  if (!send && !o.layer_done.empty())
    for (size_t g = 0; g + 1 < plan.layer_begin.size(); ++g)
      if (plan.layer_begin[g] == plan.layer_begin[g + 1])
        MLA_CUDA_TRY(cudaEventRecord(static_cast<cudaEvent_t>(o.layer_done[g]), stream),
                     "cudaEventRecord(layer_done)");
  return Status::Ok();
}

}  // namespace

Status nccl_transfer_send(const TransferPlan& plan, const TransferBuffers& src,
                          const NcclTransferOptions& options) {
  return run_schedule(plan, src, options, true);
}

Status nccl_transfer_recv(const TransferPlan& plan, const TransferBuffers& dst,
                          const NcclTransferOptions& options) {
  return run_schedule(plan, dst, options, false);
}

}  // namespace mla
