// How a TransferPlan goes over the wire (shared by both ends of the NCCL
// executor, pure host code so CI tests it): runs of at least direct_min_bytes
// travel as their own message straight from/into the cache; smaller ones are
// packed, 16-byte aligned, into a staging buffer and travel as one message.
// A round is what one ncclGroupStart/End carries; a layer group whose small
// runs exceed the staging buffer takes several rounds (the buffer is reused,
// in stream order, after the previous round's message has gone).
#pragma once
#include <cstdint>
#include <vector>

#include "mla/status.hpp"
#include "mla/transfer.hpp"

namespace mla::transfer {

inline constexpr int64_t kStagingAlign = 16;
// Direct messages of one round (one ncclGroupStart/End) when rounds span groups.
inline constexpr size_t kMaxDirectPerRound = 512;

struct StagedPiece {
  size_t run = 0;              // index into TransferPlan::runs
  int64_t staging_offset = 0;  // where the run's bytes sit in the staging buffer
};

struct Round {
  size_t group = 0;                 // the layer group (TransferPlan::layer_begin index)
  std::vector<size_t> direct;       // runs sent as their own message, in plan order
  std::vector<StagedPiece> staged;  // runs packed into one message
  int64_t staged_bytes = 0;         // the staged message's size (aligned pieces)
};

struct Schedule {
  std::vector<Round> rounds;  // in group order; every run appears exactly once
  size_t messages = 0;        // ncclSend calls in all
};

constexpr int64_t align_up(int64_t x, int64_t a) {
  return (x + a - 1) / a * a;
}

// The capacity of one staging slot: the whole buffer, or (pipelined, the
// buffer split in two for pack/wire overlap) half of it, 16-byte aligned so
// the second slot starts aligned too.
constexpr int64_t staging_slot_bytes(int64_t staging_bytes, bool pipelined) {
  return pipelined ? staging_bytes / 2 / kStagingAlign * kStagingAlign : staging_bytes;
}

// staging_bytes 0: every run direct. span_groups: a round's staged message
// takes small runs of the next layer groups too until the buffer is full (few
// large messages: NCCL's rate grows with the message size); otherwise a round
// never crosses a group (so a layer can be waited for and signalled on its
// own). Round::group is then the group of the round's first run. Errors:
// negative sizes.
Status build_schedule(const TransferPlan& plan, int64_t direct_min_bytes, int64_t staging_bytes,
                      bool span_groups, Schedule* out);

// The base of a run's pool on one side (src or dst), or an error naming the
// missing pointer.
Status run_base(const TransferBuffers& b, const CopyRun& r, const char* side, void** out);

}  // namespace mla::transfer
