// Pieces the planner's files share (not part of the public API).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "mla/plan.hpp"

namespace mla::plan::detail {

// The shape of one step the cost model prices, per GPU.
struct StepShape {
  int64_t batch;    // requests (decode) or 1 (prefill)
  int64_t context;  // cached keys per request
  int new_tokens;   // queries per request (decode 1-4; prefill = the prompt)
  int heads;        // query heads on this GPU
  int tp;
  int topk;
  bool causal_prefill;  // prefill: query t sees keys 0..t (FLOPs halve)
};

// One stage priced on the roofline; the calibration entry (kernel, format, heads),
// when present, turns the floor into a prediction.
// `calls`: how many kernel calls the stage stands for (one per layer in a step);
// the entry's per-call overhead is charged that many times.
StageCost make_stage(std::string name, std::string calib_kernel, std::string calib_format,
                     bool fp8_compute, double flops, double bytes, const Ceilings& c,
                     const Calibration* cal, int heads, double calls);
StepCost combine(std::vector<StageCost> stages);

// Bytes per token per layer this GPU holds for the format (MLA: replicated over TP).
int64_t local_cache_bytes_per_token_layer(const ModelSpec& m, KvFormat f, int tp);

// The whole model's (all layers) step on one GPU for one format.
StepCost step_cost(const ModelSpec& m, KvFormat f, bool dsa, const StepShape& s, const Ceilings& c,
                   const Calibration* cal);

// The layer view (projections.cpp): true when the model's released weights are fp8.
bool released_weights_fp8(const ModelSpec& m);
// The projections stage of `tokens` new tokens through all `layers` (calibration key
// {"kernel": "projections", "format": "bf16"|"fp8"}).
StageCost projections_stage(const LayerProjections& lp, double tokens, int layers,
                            const Ceilings& c, const Calibration* cal, int heads);
// The attention step's stages followed by the projections stage.
StepCost layer_step(const StepCost& attention, const StageCost& projections);

// Calibration format tag of a KV format ("bf16", "fp8", "fp4", "mha", "gqa").
const char* calib_format_tag(KvFormat f);

std::vector<Recommendation> recommend(const Plan& p, const Calibration* cal);

// Human units: "70,272 B", "2.30 GB", "1.23 ms".
std::string fmt_int(int64_t v);
std::string fmt_bytes(double b);
std::string fmt_time(double s);
std::string fmt_flops(double f);

// Named thresholds (datasheet estimates until a calibration replaces them).
// Chunked prefill re-decompresses the whole prefix's K/V for every chunk; keep that
// under this fraction of the chunk's own attention FLOPs.
inline constexpr double kChunkDecompressOverhead = 0.10;
// Below this many tokens a chunk's fixed costs (launches, scheduling, the MoE
// all-to-all) are not amortised. Datasheet estimate: a measured sweep replaces it.
inline constexpr int kMinChunkTokens = 512;
inline constexpr int kMaxChunkTokens = 16384;
// fp8 is recommended for speed only when its floor is at least 2% below bf16's:
// within that the two are the same on the roofline.
inline constexpr double kFp8SpeedupThreshold = 0.98;
// The DSA crossover search walks context lengths in pages of this many tokens.
inline constexpr int kPageTokens = 64;

// Smallest context above top-k (to a 64-token page) where `dsa_cheaper(L)` holds,
// or 0 when it never does up to 16M tokens. Dense minus DSA grows with L (dense
// pays a whole entry per key, DSA an indexer entry plus a logit), so bisection
// applies. Shared by the planner's recommendation and dsa_dense_threshold().
template <class Cheaper>
int64_t first_context_where_dsa_is_cheaper(int64_t topk, Cheaper&& dsa_cheaper) {
  int64_t lo = topk, hi = int64_t{1} << 24;
  if (!dsa_cheaper(hi)) return 0;
  while (hi - lo > kPageTokens) {
    const int64_t mid = lo + (hi - lo) / 2;
    (dsa_cheaper(mid) ? hi : lo) = mid;
  }
  return hi;
}

}  // namespace mla::plan::detail
