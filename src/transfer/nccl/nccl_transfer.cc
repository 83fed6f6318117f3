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
  if (o.messages_span_layers && (!o.layer_ready.empty() || !o.layer_done.empty()))
    return error(Errc::invalid_value,
                 "options.messages_span_layers with {} layer_ready / {} layer_done events: a "
                 "message spanning layers cannot wait for or signal one layer",
                 o.layer_ready.size(), o.layer_done.size());
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

// Pack (send) or unpack (recv) a round's staged pieces, staged at `slot`.
Status stage(const TransferPlan& plan, const TransferBuffers& b, const Round& r, bool send,
             char* slot, cudaStream_t stream) {
  std::vector<Piece> pieces;
  pieces.reserve(r.staged.size());
  for (const auto& sp : r.staged) {
    char* cache;
    MLA_TRY(run_address(plan, b, sp.run, send ? "src" : "dst", &cache));
    char* st = slot + sp.staging_offset;
    pieces.push_back(send ? Piece{cache, st, plan.runs[sp.run].bytes}
                          : Piece{st, cache, plan.runs[sp.run].bytes});
  }
  return cuda::cuda_status(transfer::launch_copy_pieces(pieces.data(), pieces.size(), stream),
                           "copy_pieces_kernel (staging pack/unpack)");
}

// Whether pack/unpack run on a stream of their own (pipelined staging).
bool uses_pack_stream(const NcclTransferOptions& o) {
  return o.pack_stream != nullptr && o.pack_stream != o.stream;
}

// The two streams of a call and the events that order them. Serial (no
// pack_stream): both are the caller's stream and every hand-off is a no-op,
// stream order already holds. Pipelined: the staging buffer's two slots are
// handed between the wire (`wire`, NCCL) and the copies (`copy`, pack and
// unpack), so the copy of one round runs under the message of the next or
// previous one. Events are created per call (host handles, no device memory);
// destroying a recorded event is allowed, its resources go once it completes.
class Streams {
 public:
  ~Streams() {
    for (cudaEvent_t e : events_)
      if (e != nullptr) cudaEventDestroy(e);
  }
  Status init(const NcclTransferOptions& o) {
    wire = static_cast<cudaStream_t>(o.stream);
    copy = uses_pack_stream(o) ? static_cast<cudaStream_t>(o.pack_stream) : wire;
    if (!pipelined()) return Status::Ok();
    for (cudaEvent_t& e : events_)
      MLA_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    // The copy stream starts after what the caller enqueued before the call
    // (and joins a graph capture of `wire`).
    return handoff(wire, copy, events_[kFork]);
  }
  bool pipelined() const { return copy != wire; }
  // Slot s's "full" (sender: packed; receiver: landed) and "free" events.
  static int slot_full(int s) { return kFull0 + s; }
  static int slot_free(int s) { return kFree0 + s; }
  // `to` waits for what `from` has enqueued so far.
  Status handoff(cudaStream_t from, cudaStream_t to, cudaEvent_t e) const {
    if (from == to) return Status::Ok();
    MLA_CUDA_TRY(cudaEventRecord(e, from), "cudaEventRecord");
    MLA_CUDA_TRY(cudaStreamWaitEvent(to, e), "cudaStreamWaitEvent");
    return Status::Ok();
  }
  // The caller's stream ends after everything on the copy stream.
  Status join() const { return handoff(copy, wire, events_[kJoin]); }
  // `to` waits for the last record of event e; nothing to wait for if it was
  // never recorded (skipped rather than waited on: an unrecorded event has no
  // node to depend on inside a graph capture).
  Status wait(cudaStream_t to, int e) const {
    if (!pipelined() || !recorded_[e]) return Status::Ok();
    MLA_CUDA_TRY(cudaStreamWaitEvent(to, events_[e]), "cudaStreamWaitEvent");
    return Status::Ok();
  }
  Status record(int e, cudaStream_t on) {
    if (!pipelined()) return Status::Ok();
    MLA_CUDA_TRY(cudaEventRecord(events_[e], on), "cudaEventRecord");
    recorded_[e] = true;
    return Status::Ok();
  }

  cudaStream_t wire = nullptr, copy = nullptr;

 private:
  enum { kFork, kJoin, kFull0, kFull1, kFree0, kFree1, kCount };
  cudaEvent_t events_[kCount] = {};
  bool recorded_[kCount] = {};
};

Status run_schedule(const TransferPlan& plan, const TransferBuffers& b,
                    const NcclTransferOptions& o, bool send) {
  MLA_TRY(check_options(plan, o));
  const bool pipelined = uses_pack_stream(o);
  const int64_t slot_bytes = transfer::staging_slot_bytes(int64_t(o.staging.bytes), pipelined);
  Schedule s;
  MLA_TRY(
      transfer::build_schedule(plan, o.direct_min_bytes, slot_bytes, o.messages_span_layers, &s));
  const char* side = send ? "src" : "dst";
  // Resolve every address first: a bad base is an error before anything is enqueued.
  for (size_t i = 0; i < plan.runs.size(); ++i) {
    char* a;
    MLA_TRY(run_address(plan, b, i, side, &a));
  }
  Streams st;
  MLA_TRY(st.init(o));
  auto comm = static_cast<ncclComm_t>(o.comm);
  for (size_t k = 0; k < s.rounds.size(); ++k) {
    const Round& r = s.rounds[k];
    const bool first_of_group = k == 0 || s.rounds[k - 1].group != r.group;
    const bool last_of_group = k + 1 == s.rounds.size() || s.rounds[k + 1].group != r.group;
    const bool staged = !r.staged.empty();
    // Rounds alternate between the slots; serial: one slot, reused in stream order.
    const int slot = pipelined ? int(k & 1) : 0;
    char* slot_data = static_cast<char*>(o.staging.data) + slot * slot_bytes;
    if (send && first_of_group && !o.layer_ready.empty()) {
      auto ready = static_cast<cudaEvent_t>(o.layer_ready[r.group]);
      MLA_CUDA_TRY(cudaStreamWaitEvent(st.wire, ready), "cudaStreamWaitEvent(layer_ready)");
      if (st.pipelined())
        MLA_CUDA_TRY(cudaStreamWaitEvent(st.copy, ready), "cudaStreamWaitEvent(layer_ready)");
    }
    if (send && staged) {  // pack once the slot's last message has gone
      MLA_TRY(st.wait(st.copy, st.slot_free(slot)));
      MLA_TRY(stage(plan, b, r, true, slot_data, st.copy));
      MLA_TRY(st.record(st.slot_full(slot), st.copy));
      MLA_TRY(st.wait(st.wire, st.slot_full(slot)));
    }
    if (!send && staged) MLA_TRY(st.wait(st.wire, st.slot_free(slot)));  // its unpack is done
    MLA_NCCL_TRY(ncclGroupStart(), "ncclGroupStart");
    for (size_t i : r.direct) {
      char* a;
      MLA_TRY(run_address(plan, b, i, side, &a));
      const size_t n = static_cast<size_t>(plan.runs[i].bytes);
      if (send)
        MLA_NCCL_TRY(ncclSend(a, n, ncclChar, o.peer, comm, st.wire), "ncclSend");
      else
        MLA_NCCL_TRY(ncclRecv(a, n, ncclChar, o.peer, comm, st.wire), "ncclRecv");
    }
    if (staged) {
      const size_t n = static_cast<size_t>(r.staged_bytes);
      if (send)
        MLA_NCCL_TRY(ncclSend(slot_data, n, ncclChar, o.peer, comm, st.wire), "ncclSend");
      else
        MLA_NCCL_TRY(ncclRecv(slot_data, n, ncclChar, o.peer, comm, st.wire), "ncclRecv");
    }
    MLA_NCCL_TRY(ncclGroupEnd(), "ncclGroupEnd");
    if (send && staged) MLA_TRY(st.record(st.slot_free(slot), st.wire));
    if (!send && (staged || last_of_group)) {
      // The copy stream takes over after the round landed: it unpacks, and it
      // is where a layer ends (its direct runs landed on the wire before).
      MLA_TRY(st.record(st.slot_full(slot), st.wire));
      MLA_TRY(st.wait(st.copy, st.slot_full(slot)));
    }
    if (!send && staged) {
      MLA_TRY(stage(plan, b, r, false, slot_data, st.copy));
      MLA_TRY(st.record(st.slot_free(slot), st.copy));
    }
    if (!send && last_of_group && !o.layer_done.empty())
      MLA_CUDA_TRY(cudaEventRecord(static_cast<cudaEvent_t>(o.layer_done[r.group]), st.copy),
                   "cudaEventRecord(layer_done)");
  }
  MLA_TRY(st.join());
  // Groups with no runs (a layer with 0 tokens) still get their event.
  if (!send && !o.layer_done.empty())
    for (size_t g = 0; g + 1 < plan.layer_begin.size(); ++g)
      if (plan.layer_begin[g] == plan.layer_begin[g + 1])
        MLA_CUDA_TRY(cudaEventRecord(static_cast<cudaEvent_t>(o.layer_done[g]), st.wire),
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
