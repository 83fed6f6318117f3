#include "transfer/schedule.hpp"

#include <algorithm>

#include "common/validate.hpp"

namespace mla::transfer {

using detail::error;

Status build_schedule(const TransferPlan& plan, int64_t direct_min_bytes, int64_t staging_bytes,
                      bool span_groups, Schedule* out) {
  if (direct_min_bytes < 0)
    return error(Errc::invalid_value, "direct_min_bytes = {} is negative", direct_min_bytes);
  if (staging_bytes < 0)
    return error(Errc::invalid_value, "staging.bytes = {} is negative", staging_bytes);
  if (plan.layer_begin.empty() || plan.layer_begin.back() != plan.runs.size())
    return error(Errc::invalid_value,
                 "plan.layer_begin ends at {} but the plan has {} runs (not a plan_transfer "
                 "result?)",
                 plan.layer_begin.empty() ? 0 : plan.layer_begin.back(), plan.runs.size());
  Schedule s;
  Round round;
  for (size_t g = 0; g + 1 < plan.layer_begin.size(); ++g) {
    if (round.direct.empty() && round.staged.empty()) round.group = g;
    for (size_t i = plan.layer_begin[g]; i < plan.layer_begin[g + 1]; ++i) {
      const int64_t bytes = plan.runs[i].bytes;
      const int64_t padded = align_up(bytes, kStagingAlign);
      // Direct: large runs, and every run when the staging buffer cannot hold it.
      if (bytes >= direct_min_bytes || padded > staging_bytes) {
        // Spanning rounds would otherwise put every direct run of the request
        // in one NCCL group: bound a group's messages.
        if (span_groups && round.direct.size() == kMaxDirectPerRound) {
          s.rounds.push_back(std::move(round));
          round = Round{};
          round.group = g;
        }
        round.direct.push_back(i);
        continue;
      }
      if (round.staged_bytes + padded > staging_bytes) {  // buffer full: next round
        s.rounds.push_back(std::move(round));
        round = Round{};
        round.group = g;
      }
      round.staged.push_back({i, round.staged_bytes});
      round.staged_bytes += padded;
    }
    if (!span_groups && (!round.direct.empty() || !round.staged.empty())) {
      s.rounds.push_back(std::move(round));
      round = Round{};
    }
  }
  if (!round.direct.empty() || !round.staged.empty()) s.rounds.push_back(std::move(round));
  for (const Round& r : s.rounds) s.messages += r.direct.size() + (r.staged.empty() ? 0 : 1);
  *out = std::move(s);
  return Status::Ok();
}

Status run_base(const TransferBuffers& b, const CopyRun& r, const char* side, void** out) {
  const auto& list = r.cache == TransferCache::latent ? b.latent : b.indexer;
  if (r.layer < 0 || static_cast<size_t>(r.layer) >= list.size() || list[r.layer] == nullptr)
    return error(Errc::invalid_value, "{}.{}[{}]: no base pointer for layer {} ({} given)", side,
                 transfer_cache_name(r.cache), r.layer, r.layer, list.size());
  *out = list[r.layer];
  return Status::Ok();
}

}  // namespace mla::transfer

namespace mla {

int64_t nccl_transfer_staging_bytes(const TransferPlan& plan, int64_t direct_min_bytes) {
  int64_t most = 0;
  for (size_t g = 0; g + 1 < plan.layer_begin.size(); ++g) {
    int64_t sum = 0;
    for (size_t i = plan.layer_begin[g]; i < plan.layer_begin[g + 1]; ++i)
      if (plan.runs[i].bytes < direct_min_bytes)
        sum += transfer::align_up(plan.runs[i].bytes, transfer::kStagingAlign);
    most = std::max(most, sum);
  }
  return most;
}

}  // namespace mla
