// The planner's layer view: the attention layer's projections stage beside attention.
// Expected numbers are written out here by hand from DeepSeek-V3.2's dims (hidden 7168,
// q_lora 1536, kv_lora 512 + rope 64, 128 heads x (128 nope + 64 rope), v 128, the
// indexer's 64 x 128 heads), independently of the planner's GEMM list.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "common/plan_lookup.hpp"
#include "mla/plan.hpp"

namespace mla::plan {
namespace {

using testing::make;
using testing::rec;
using testing::row;

// One V3.2 attention layer's matrices, all 128 heads, [out x in] each.
constexpr double kWqA = 1536.0 * 7168;         // 11,010,048
constexpr double kWqB = 128.0 * 192 * 1536;    // 37,748,736
constexpr double kWkvA = 576.0 * 7168;         // 4,128,768
constexpr double kWuk = 128.0 * 512 * 128;     // 8,388,608 (wkv_b's key half)
constexpr double kWuv = 128.0 * 128 * 512;     // 8,388,608 (wkv_b's value half)
constexpr double kWo = 7168.0 * 128 * 128;     // 117,440,512
constexpr double kIdxWk = 128.0 * 7168;        // 917,504
constexpr double kIdxWqB = 64.0 * 128 * 1536;  // 12,582,912
constexpr double kIdxWproj = 64.0 * 7168;      // 458,752
constexpr double kDenseParams = kWqA + kWqB + kWkvA + kWuk + kWuv + kWo + kIdxWk;
constexpr double kDsaParams = kDenseParams + kIdxWqB + kIdxWproj;
static_assert(kDsaParams == 201064448.0, "the sum written out: 201,064,448 weights per layer");
static_assert(kDenseParams == 188022784.0, "dense steps skip the indexer's query side");

// The bf16 input and output vectors of each GEMM one token runs (per-head matrices
// once per head).
constexpr double kDsaActBytes =
    2 * ((7168 + 1536) + (1536 + 128 * 192) + (7168 + 576) + 128 * (128 + 512) + 128 * (512 + 128) +
         (128 * 128 + 7168) + (7168 + 128) + (1536 + 64 * 128) + (7168 + 64));

Workload v32(int64_t batch, int64_t context, WeightPrecision wp) {
  Workload w;
  w.model = "deepseek-v3.2";
  w.gpu = "h200";
  w.batch = batch;
  w.context = context;
  w.weights = wp;
  return w;
}

TEST(PlanLayer, WeightBytesOfOneV32LayerByHand) {
  const ModelSpec* m = nullptr;
  ASSERT_TRUE(find_model("deepseek-v3.2", &m).ok());
  const LayerProjections dsa = layer_projections(*m, KvFormat::mla_bf16, 128, false, true, true);
  EXPECT_DOUBLE_EQ(dsa.params, kDsaParams);
  EXPECT_DOUBLE_EQ(dsa.weight_bytes, 2 * kDsaParams);  // 402,128,896 B in bf16
  const LayerProjections dense = layer_projections(*m, KvFormat::mla_bf16, 128, false, false, true);
  EXPECT_DOUBLE_EQ(dense.weight_bytes, 2 * kDenseParams);
  // fp8: one byte each + one fp32 scale per 128 x 128 block, counted matrix by matrix:
  // wq_a 12x56, wq_b 192x12, wkv_a 5x56, W_UK 128 x (4x1), W_UV 128 x (1x4), wo 56x128,
  // wk 1x56, indexer wq_b 64x12, weights_proj 1x56 blocks.
  constexpr double kBlocks =
      12 * 56 + 192 * 12 + 5 * 56 + 128 * 4 + 128 * 4 + 56 * 128 + 56 + 64 * 12 + 56;
  static_assert(kBlocks == 12328);
  const LayerProjections f8 = layer_projections(*m, KvFormat::mla_fp8, 128, true, true, true);
  EXPECT_DOUBLE_EQ(f8.weight_bytes, kDsaParams + 4 * kBlocks);
  EXPECT_TRUE(f8.fp8);
}

TEST(PlanLayer, FlopsPerTokenAndTensorParallelSplit) {
  const ModelSpec* m = nullptr;
  ASSERT_TRUE(find_model("deepseek-v3.2", &m).ok());
  // Decode (absorbed): every weight is used once per token: 2 FLOP per weight.
  const LayerProjections d = layer_projections(*m, KvFormat::mla_bf16, 128, false, true, true);
  EXPECT_DOUBLE_EQ(d.flops_per_token, 2 * kDsaParams);
  EXPECT_DOUBLE_EQ(d.activation_bytes_per_token, kDsaActBytes);
  // Non-absorbed prefill: W_UK/W_UV are read (by the decompression) but not run per token.
  const LayerProjections pf = layer_projections(*m, KvFormat::mla_bf16, 128, false, false, false);
  EXPECT_DOUBLE_EQ(pf.flops_per_token, 2 * (kDenseParams - kWuk - kWuv));
  EXPECT_DOUBLE_EQ(pf.params, kDenseParams);
  // TP 2 (64 heads per GPU): wq_b, W_UK, W_UV, wo split; wq_a, wkv_a, the indexer replicated.
  const LayerProjections t2 = layer_projections(*m, KvFormat::mla_bf16, 64, false, true, true);
  EXPECT_DOUBLE_EQ(t2.params, kDsaParams - (kWqB + kWuk + kWuv + kWo) / 2);
}

TEST(PlanLayer, BatchOneIsMemoryBoundOnTheWeights) {
  const Plan p = make(v32(1, 32768, WeightPrecision::bf16));
  const FormatPlan& f = row(p, "mla-bf16+dsa");
  const StageCost& proj = f.layer.stages.back();
  EXPECT_EQ(proj.name, "projections");
  EXPECT_EQ(proj.binds, "memory");
  EXPECT_EQ(proj.compute_ceiling, "bf16");
  const double bytes = 61 * (2 * kDsaParams + kDsaActBytes);
  EXPECT_DOUBLE_EQ(proj.bytes, bytes);
  EXPECT_DOUBLE_EQ(proj.flops, 61 * 2 * kDsaParams);
  EXPECT_NEAR(proj.floor_s, bytes / 4391e9, 1e-12);  // docs/benchmarks.md's measured read
  // ~92 us of bf16 weights per layer per step (402 MB at 4391 GB/s).
  EXPECT_NEAR(proj.floor_s / 61 * 1e6, 91.6, 0.1);
  // fp8 weights: half the bytes, the fp8 compute ceiling.
  const Plan p8 = make(v32(1, 32768, WeightPrecision::fp8));
  EXPECT_EQ(row(p8, "mla-bf16+dsa").layer.stages.back().compute_ceiling, "fp8");
  EXPECT_NEAR(row(p8, "mla-bf16+dsa").layer.stages.back().floor_s / proj.floor_s, 0.5, 0.001);
  // A batch past the ridge (792e12 / 4391e9 = 180 FLOP/B, 2 FLOP per 2-byte weight per
  // token) turns the stage compute-bound.
  const Plan big = make(v32(512, 8192, WeightPrecision::bf16));
  EXPECT_EQ(row(big, "mla-bf16").layer.stages.back().binds, "compute");
}

TEST(PlanLayer, LayerIsAttentionPlusProjectionsAndKeepsTheOldStep) {
  const Plan p = make(v32(4, 131072, WeightPrecision::bf16));
  for (const FormatPlan& f : p.formats) {
    ASSERT_EQ(f.layer.stages.size(), f.step.stages.size() + 1) << f.name;
    EXPECT_NEAR(f.layer.floor_s, f.step.floor_s + f.layer.stages.back().floor_s,
                1e-12 * f.layer.floor_s)
        << f.name;
    EXPECT_DOUBLE_EQ(f.layer.bytes, f.step.bytes + f.layer.stages.back().bytes) << f.name;
  }
  // The default resolves to the released precision: fp8 for V3.2, bf16 for V2-Lite.
  Workload w = v32(4, 131072, WeightPrecision::released);
  EXPECT_EQ(make(w).workload.weights, WeightPrecision::fp8);
  EXPECT_TRUE(make(w).weights_auto);
  w.model = "deepseek-v2-lite";
  EXPECT_EQ(make(w).workload.weights, WeightPrecision::bf16);
  // 128K, batch 4, bf16 weights: DSA attention 9.4x faster than dense, the layer only ~2.4x;
  // the recommendation says so.
  const FormatPlan& dense = row(p, "mla-bf16");
  const FormatPlan& dsa = row(p, "mla-bf16+dsa");
  const double att = dense.step.floor_s / dsa.step.floor_s;
  const double lay = dense.layer.floor_s / dsa.layer.floor_s;
  EXPECT_GT(att, 8.0);
  EXPECT_LT(lay, 3.0);
  const Recommendation& r = rec(p, "layer");
  EXPECT_NE(r.reason.find("projections dominate"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("on the whole layer"), std::string::npos) << r.reason;
  // Dense at 128K: attention dominates.
  Workload wd = v32(4, 131072, WeightPrecision::bf16);
  wd.model = "deepseek-v3";
  EXPECT_NE(rec(make(wd), "layer").reason.find("attention dominates"), std::string::npos);
}

TEST(PlanLayer, CalibrationEntryScalesTheStage) {
  Calibration cal;
  ASSERT_TRUE(parse_calibration(R"({"gpu": "h200", "entries": [
      {"kernel": "projections", "format": "bf16", "h_q": 128, "fraction_of_ceiling": 0.5}]})",
                                &cal)
                  .ok());
  const Plan base = make(v32(4, 131072, WeightPrecision::bf16));
  const Plan p = make(v32(4, 131072, WeightPrecision::bf16), &cal);
  const FormatPlan& f = row(p, "mla-bf16+dsa");
  const StageCost& proj = f.layer.stages.back();
  EXPECT_DOUBLE_EQ(proj.fraction_used, 0.5);
  EXPECT_DOUBLE_EQ(proj.predicted_s, 2 * proj.floor_s);
  EXPECT_DOUBLE_EQ(f.layer.predicted_s, f.step.predicted_s + 2 * proj.floor_s);
  // The attention-only step is untouched by a projections entry.
  EXPECT_DOUBLE_EQ(f.step.predicted_s, row(base, "mla-bf16+dsa").step.predicted_s);
  // An fp8 plan does not use the bf16 entry.
  const Plan p8 = make(v32(4, 131072, WeightPrecision::fp8), &cal);
  const StageCost& proj8 = row(p8, "mla-bf16+dsa").layer.stages.back();
  EXPECT_DOUBLE_EQ(proj8.predicted_s, proj8.floor_s);
  EXPECT_NE(proj8.predicted_from.find("no projections fp8 entry"), std::string::npos);
}

TEST(PlanLayer, JsonKeysAndBadWeightsName) {
  const Plan p = make(v32(4, 8192, WeightPrecision::bf16));
  const auto j = nlohmann::json::parse(render_json(p));
  const auto& f = j["formats"][0];
  EXPECT_TRUE(f.contains("step"));  // the old key stays
  for (const char* k : {"projections", "layer_step"}) EXPECT_TRUE(f.contains(k)) << k;
  EXPECT_TRUE(f["layer_step"].contains("per_layer_floor_s"));
  EXPECT_TRUE(f["projections"].contains("weight_bytes_per_layer"));
  EXPECT_EQ(j["workload"]["weights"], "bf16");
  EXPECT_NE(render_text(p).find("Layer view"), std::string::npos);
  WeightPrecision wp;
  Status st = parse_weight_precision("fp16", &wp);
  EXPECT_EQ(st.code(), Errc::invalid_value);
  EXPECT_NE(st.message().find("'fp16'"), std::string::npos) << st.message();
  ASSERT_TRUE(parse_weight_precision("FP8", &wp).ok());
  EXPECT_EQ(wp, WeightPrecision::fp8);
}

}  // namespace
}  // namespace mla::plan
