// The planner as a library. Given a GPU, a model and a
// workload it computes KV bytes per token for each cache format, the largest
// batch that fits beside the weights, bytes and FLOPs per decode step, the
// roofline floor and the ceiling that binds, and a recommended configuration
// with one reason per choice. docs/planner.md has the formulas and sources.
//
// Everything here is plain arithmetic on published or measured numbers: no
// GPU is touched. Numbers that should come from measurement but do not exist
// yet are named constants marked "datasheet estimate"; a calibration file
// (measured kernel efficiencies from `mla bench`) replaces them.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mla/status.hpp"

namespace mla::plan {

// ---- hardware ------------------------------------------------------------------
// Datasheet numbers are dense (no 2:4 sparsity), per GPU, in SI units (bytes,
// bytes/s, FLOP/s). A value of 0 means "does not exist" (no FP4 on Hopper) or,
// for the measured_* fields, "not measured".
struct GpuSpec {
  const char* name;       // CLI name: "h200"
  const char* full_name;  // "NVIDIA H200 SXM 141GB"
  const char* arch;       // "hopper" or "blackwell"
  double hbm_bytes;
  double hbm_bw;      // bytes/s
  double bf16_flops;  // dense tensor-core FLOP/s
  double fp8_flops;   // dense
  double fp4_flops;   // dense; 0 where the tensor cores have no FP4
  double nvlink_bw;   // bytes/s per GPU, both directions together
  int sms;
  double l2_bytes;
  const char* source;  // where the numbers come from
  // Our own measurements (docs/benchmarks.md); 0 = none. Used instead of the datasheet where
  // present.
  double measured_read_bw;
  double measured_copy_bw;
  double measured_bf16_flops;
  double measured_fp8_flops;
  const char* measured_source;
};

std::span<const GpuSpec> known_gpus();
// Case-insensitive. Unknown names give Errc::invalid_value listing the known ones.
Status find_gpu(std::string_view name, const GpuSpec** out);

// The ceilings the roofline uses: measured where we have them, datasheet otherwise.
struct Ceilings {
  double read_bw;  // decode streams the cache: the read ceiling is the one that binds
  double bf16_flops;
  double fp8_flops;
  double fp4_flops;
  bool read_bw_measured;
  bool bf16_measured;
  bool fp8_measured;
  std::string source;  // one line: which numbers are measured, which are datasheet
};
Ceilings ceilings_for(const GpuSpec& gpu);

// ---- models --------------------------------------------------------------------
enum class AttentionKind { mla, gqa };

struct ModelSpec {
  const char* name;  // CLI name: "deepseek-v3.2"
  const char* full_name;
  AttentionKind native;  // the model's own attention
  double params;         // total parameters (weights that must sit in HBM)
  double active_params;  // per token (MoE: routed experts chosen + shared parts)
  double weight_bytes_per_param;
  const char* weight_precision;  // e.g. "fp8 (DeepSeek's released weights)"
  int layers = 0;
  int hidden = 0;
  int heads = 0;  // query heads
  // MLA (native == mla): latent, rope, per-head nope/value dims of the non-absorbed form.
  int d_c = 0, d_r = 0, d_nope = 0, d_v = 0;
  // The cached-K/V forms for contrast: MHA caches heads x (head_dim_k + head_dim_v);
  // GQA caches gqa_kv_heads x 2 x head_dim_k. gqa_kv_heads 0 = no GQA row for this model.
  int head_dim_k = 0, head_dim_v = 0;
  int gqa_kv_heads = 0;
  // DSA lightning indexer (DeepSeek-V3.2); indexer_heads 0 = none.
  int indexer_heads = 0, indexer_dim = 0, indexer_bytes_per_token = 0, trained_topk = 0;
  // MoE routing (0 = dense model): used for the chunk-size recommendation.
  int routed_experts = 0, experts_per_token = 0;
  const char* source = "";
  // MLA query latent (q_lora_rank; 0 = no query compression: wq maps hidden to the heads
  // directly, as in V2-Lite). Used by the layer view's projections stage.
  int q_lora_rank = 0;
};

std::span<const ModelSpec> known_models();
Status find_model(std::string_view name, const ModelSpec** out);

// ---- KV cache formats ------------------------------------------------------------
enum class KvFormat { mha_bf16, gqa_bf16, mla_bf16, mla_fp8, mla_fp4 };
const char* kv_format_name(KvFormat f);

// Bytes one token occupies in one layer's cache, for the whole model (all heads),
// not counting the DSA indexer. MLA: bf16 1152, fp8 656 (fp8_ds_mla), fp4 416 (on paper).
int64_t kv_bytes_per_token_layer(const ModelSpec& m, KvFormat f);
// The on-paper FP4 entry: 512 e2m1 latents (256 B) + one e4m3 scale per 16 (32 B)
// + 64 bf16 rope (128 B), following fp8_ds_mla's choice of keeping rope in bf16.
inline constexpr int64_t kMlaFp4EntryBytes = 256 + 32 + 128;

// ---- calibration (measured kernel efficiencies) ------------------------------------
struct CalibrationEntry {
  std::string kernel;              // "decode", "sparse_decode", "indexer", "prefill"
  std::string format;              // "bf16", "fp8", "fp4", "mha" ... (see docs/planner.md)
  int h_q = 0;                     // heads per GPU the measurement ran with
  double fraction_of_ceiling = 0;  // achieved / roofline floor, in (0, 1]
  // Fixed time per call of the kernel (launch, fill, tail, a short row's latency)
  // in microseconds, >= 0 (optional, 0 when absent): the prediction is
  // calls * overhead_us + floor / fraction. Small batches need it: a top-k of 4
  // rows or a sparse decode of 4 requests is latency, not roofline.
  double overhead_us = 0;
};
struct Calibration {
  std::string gpu;     // must match the plan's GPU
  std::string source;  // free text: which run produced it
  std::vector<CalibrationEntry> entries;
  // Best entry for (kernel, format, h_q): exact h_q first, else the nearest h_q (by ratio) of
  // the same kernel and format. nullptr when none.
  const CalibrationEntry* find(std::string_view kernel, std::string_view format, int h_q) const;
};
// Parses the schema of docs/planner.md; errors name the field and the bad value.
Status parse_calibration(std::string_view json_text, Calibration* out);
Status load_calibration(const std::string& path, Calibration* out);

// ---- workload and plan ---------------------------------------------------------------
enum class Phase { decode, prefill };
// Cache precision asked for. MLA: bf16 1152 B, fp8 656 B (fp8_ds_mla), fp4 416 B (on
// paper). GQA models are priced in bf16 only.
enum class KvPrecision { bf16, fp8, fp4 };
const char* kv_precision_name(KvPrecision p);
Status parse_kv_precision(std::string_view name, KvPrecision* out);
Status parse_phase(std::string_view name, Phase* out);
const char* phase_name(Phase p);
// Precision the attention layer's projection weights are read at (the "projections"
// stage). `released` = the model's released weights (fp8 for the DeepSeek-V3 family,
// bf16 otherwise); make_plan resolves it to bf16 or fp8.
enum class WeightPrecision { released, bf16, fp8 };
const char* weight_precision_name(WeightPrecision p);
Status parse_weight_precision(std::string_view name, WeightPrecision* out);

struct Workload {
  std::string model = "deepseek-v3.2";
  std::string gpu = "h200";
  Phase phase = Phase::decode;
  // Requests per GPU in the step. 0 (the default) = auto: the largest batch that fits
  // beside the weights with the asked KV precision (at least 1), so the default plan
  // describes a configuration that runs. Every format's own largest batch is reported too.
  int64_t batch = 0;
  int64_t context = 32768;  // cached tokens per request (keys each new token attends)
  int new_tokens = 1;       // per request per step: 1 = decode, 2-4 = speculative decoding
  KvPrecision kv = KvPrecision::bf16;  // the precision the recommendation starts from
  int tp = 1;                          // attention tensor parallel: heads per GPU = heads / tp
  // GPUs the weights are spread over (expert/tensor parallel). Default 8 = one HGX
  // node, DeepSeek's serving layout: data-parallel attention (tp 1), experts spread
  // over the node. Weights per GPU = params * bytes / weight_shards.
  int weight_shards = 8;
  int topk = 2048;        // DSA top-k (the model's trained value by default)
  double mem_util = 0.9;  // fraction of HBM the engine may use (vLLM's default)
  // Precision of the attention layer's projection weights (the layer view's projections
  // stage only: the capacity check keeps the model's released precision for the whole
  // model's weights, as the layer study accounts them).
  WeightPrecision weights = WeightPrecision::released;
};

// ---- the attention layer's projections ---------------------------------------------------
// One attention layer's projection GEMMs on one GPU (heads_per_gpu = heads / tp): MLA
// q down (wq_a) and up (wq_b, split over TP), kv down (wkv_a), W_UK absorption and W_UV per
// head (wkv_b, split), o_proj (split); V3.2's indexer wk (always: its key cache is kept)
// and wq_b + weights_proj (when the indexer runs). GQA rows: q, k, v, o. docs/planner.md.
struct LayerProjections {
  double params = 0;                      // matrix weights of one layer on this GPU
  double weight_bytes = 0;                // read once per step (fp8: + 128x128 fp32 block scales)
  double flops_per_token = 0;             // 2 x in x out summed over the GEMMs a token runs
  double activation_bytes_per_token = 0;  // bf16 input + output of each GEMM
  bool fp8 = false;                       // weights (and GEMMs) in fp8, else bf16
};
// `indexer_queries`: the indexer runs (DSA above top-k); `per_token_absorb`: W_UK/W_UV run
// per new token (absorbed form, or MHA decode decompressing the new token); false for the
// non-absorbed prefill, whose decompression stage prices them per key.
LayerProjections layer_projections(const ModelSpec& m, KvFormat f, int heads_per_gpu, bool fp8,
                                   bool indexer_queries, bool per_token_absorb);

// One kernel of a step: FLOPs, bytes and its roofline floor.
struct StageCost {
  std::string name;          // "attention", "indexer", "top-k", "sparse attention"
  std::string calib_kernel;  // the calibration kernel name that times this stage
  std::string calib_format;
  std::string compute_ceiling;  // "bf16" or "fp8": which tensor-core peak applies
  double flops = 0;
  double bytes = 0;
  double compute_s = 0;  // flops / peak
  double memory_s = 0;   // bytes / read bandwidth
  double floor_s = 0;    // max of the two
  std::string binds;     // "compute" or "memory"
  double predicted_s =
      0;             // calls * overhead + floor / measured fraction (= floor without calibration)
  double calls = 0;  // kernel calls the stage stands for (layers x launches)
  double overhead_s = 0;       // calls * the entry's overhead_us (0 without calibration)
  double fraction_used = 1.0;  // the measured fraction applied (1 = none)
  std::string predicted_from;  // "roofline floor (no calibration)" or the entry used
};

struct StepCost {
  std::vector<StageCost> stages;
  double flops = 0, bytes = 0;
  double intensity = 0;  // flops / bytes
  double floor_s = 0;    // sum of the stages' floors (they run one after another)
  double predicted_s = 0;
  std::string binds;  // the binding ceiling of the stage that takes longest
};

struct FormatPlan {
  std::string name;  // "mla-fp8+dsa", "gqa-8-bf16" ...
  KvFormat format;
  bool dsa = false;       // attention over top-k keys chosen by the indexer
  bool native = false;    // the model's own format (vs a contrast row)
  bool on_paper = false;  // no kernel exists (FP4 on Blackwell)
  std::string note;
  int64_t cache_bytes_per_token_layer = 0;    // whole model, all heads
  int64_t indexer_bytes_per_token_layer = 0;  // 132 for V3.2's MLA rows
  // Per GPU: MLA's latent is shared by all heads so tensor parallelism replicates it;
  // MHA/GQA split their KV heads over the TP ranks.
  int64_t kv_bytes_per_token = 0;   // all layers, per GPU, indexer included
  double kv_bytes_per_request = 0;  // kv_bytes_per_token * context
  int64_t max_batch = 0;            // requests that fit beside the weights
  bool batch_fits = false;
  StepCost step;  // decode: one step of `batch` requests; prefill: one request's prompt
  // The layer view: the attention stages above plus one "projections" stage (all layers):
  // the whole attention layer's step, x layers. Per layer = layer.floor_s / layers.
  LayerProjections projections;  // one layer, this GPU
  StepCost layer;
};

struct Recommendation {
  std::string item;  // "attention form", "DSA", "top-k", "chunk size", "KV precision", ...
  std::string choice;
  std::string reason;  // one line
};

struct Plan {
  Workload workload;  // with batch resolved when it was 0 (auto)
  bool batch_auto = false;
  bool weights_auto = false;  // workload.weights was `released` (resolved to bf16 or fp8)
  const GpuSpec* gpu = nullptr;
  const ModelSpec* model = nullptr;
  Ceilings ceilings;
  int heads_per_gpu = 0;
  double weights_bytes_per_gpu = 0;
  double usable_hbm_bytes = 0;           // hbm * mem_util
  double free_bytes = 0;                 // usable - weights (may be negative)
  int min_weight_shards = 0;             // smallest shard count whose weights leave room
  double ridge_bf16 = 0, ridge_fp8 = 0;  // FLOP per byte where compute meets memory
  std::vector<FormatPlan> formats;
  std::vector<Recommendation> recommendations;
  std::vector<std::string> notes;
  bool calibrated = false;
  std::string calibration_source;
};

// Validates the workload (names, positive sizes, tp dividing the heads...) and
// computes the plan. `cal` may be null.
Status make_plan(const Workload& w, const Calibration* cal, Plan* out);
std::string render_text(const Plan& p);
std::string render_json(const Plan& p);  // pretty-printed JSON object

// ---- thresholds the recommendation uses ----------------------------------------------
// Analytic break-even in new tokens per request between the absorbed form
// (2*h*(576+512) FLOP per query-key) and the non-absorbed one (2*h*(192+128) per
// query-key plus 2*512*h*(128+128) per key to decompress K and V). Independent of
// h. The efficiencies of the kernels shift it; calibration supplies them: the
// decompression GEMMs run at their own fraction (default: the attention's). With
// the H200's fitted fractions (decode 61%, MHA attention 36.5%, decompression
// 82%) it is 174; measured 180-235 (docs/perf-log.md, the crossover sweep).
double absorbed_breakeven_new_tokens(const ModelSpec& m, double absorbed_fraction,
                                     double nonabsorbed_fraction, double decompress_fraction = -1);

// ---- seed check ---------------------------------------------------------------------
struct SeedCheckRow {
  std::string seed;     // "000" or "004"
  std::string where;    // section / table cell
  std::string claim;    // what the seed says
  std::string ours;     // our number
  std::string verdict;  // "right", "plausible", "approx", "wrong", "impossible"
  std::string reason;   // one line
};
std::vector<SeedCheckRow> seed_check();
std::string render_seed_check_text(const std::vector<SeedCheckRow>& rows);
std::string render_seed_check_json(const std::vector<SeedCheckRow>& rows);

// ---- the DSA step's threshold (src/plan/dsa_threshold.cpp) ----------------------

// Which step the crossover is computed for. Defaults: DeepSeek-V3.2, bf16
// latent cache, 128 heads on the GPU (tp 1), one new token, top-2048.
struct DsaThresholdOptions {
  const char* model = "deepseek-v3.2";
  const char* kv = "bf16";  // "bf16" or "fp8" (the kernels that exist)
  int heads = 128;
  int new_tokens = 1;
  int topk = 2048;
  // Requests in the step. Without calibration batch cancels (both steps scale
  // with it); a calibration's per-call overheads do not, so the crossover
  // depends on it. 64: the batch of the measured sweep (kDsaDenseBelowH200*).
  int batch = 64;
};

// The context length (above topk, found to within one 64-token page) from which the
// planner's cost model predicts the DSA step (indexer + top-k + sparse
// attention) to be cheaper than dense decode, for `gpu` ("h200", ...; see
// `mla plan --help`). Without calibration it compares roofline floors
// (datasheet or measured ceilings); with `calibration_json` (the TEXT
// of a calibration file, docs/planner.md's schema, for the same GPU) it
// compares the calibrated predictions (floor / measured fraction per kernel).
// *tokens = 0 when DSA never wins up to 16M tokens. This is the planner's
// prediction, not a measured crossover (docs/dsa.md); mla/dsa.hpp's
// DsaPolicy::dense_below takes it.
Status dsa_dense_threshold(const char* gpu, const char* calibration_json, int64_t* tokens,
                           const DsaThresholdOptions& opts = {});

}  // namespace mla::plan
