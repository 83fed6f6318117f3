// The planner: KV arithmetic, capacity, roofline binding, recommendations, calibration,
// the seed check and the CLI-facing errors. Expected numbers are computed here by hand
// from the formulas of docs/design.md, independently of the planner's code paths.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/plan_lookup.hpp"
#include "mla/plan.hpp"

namespace mla::plan {
namespace {

const ModelSpec& M(const char* n) {
  const ModelSpec* m = nullptr;
  EXPECT_TRUE(find_model(n, &m).ok()) << n;
  return *m;
}

using testing::make;
using testing::rec;
using testing::row;

TEST(Plan, KvBytesPerToken) {
  // docs/design.md section 2: bf16 entry 576 x 2, fp8_ds_mla 512 + 16 + 128, indexer 132.
  EXPECT_EQ(kv_bytes_per_token_layer(M("deepseek-v3"), KvFormat::mla_bf16), 1152);
  EXPECT_EQ(kv_bytes_per_token_layer(M("deepseek-v3"), KvFormat::mla_fp8), 656);
  EXPECT_EQ(kv_bytes_per_token_layer(M("deepseek-v3"), KvFormat::mla_fp4), kMlaFp4EntryBytes);
  EXPECT_EQ(kMlaFp4EntryBytes, 416);
  // V3: 61 x 1152 = 70,272 B per token; V3's MHA form caches 128 x (192 + 128) x 2 per layer.
  Workload w;
  w.model = "deepseek-v3";
  w.batch = 1;
  Plan p = make(w);
  EXPECT_EQ(row(p, "mla-bf16").kv_bytes_per_token, 61 * 1152);
  EXPECT_EQ(row(p, "mla-bf16").kv_bytes_per_token, 70272);
  EXPECT_EQ(row(p, "mla-fp8").kv_bytes_per_token, 61 * 656);
  EXPECT_EQ(row(p, "mha-bf16").cache_bytes_per_token_layer, 128 * 320 * 2);
  EXPECT_DOUBLE_EQ(row(p, "mla-bf16").kv_bytes_per_request, 70272.0 * 32768);
  // V3.2 adds the 132 B indexer entry in every layer.
  w.model = "deepseek-v3.2";
  p = make(w);
  EXPECT_EQ(row(p, "mla-bf16+dsa").kv_bytes_per_token, 61 * (1152 + 132));
  EXPECT_EQ(row(p, "mla-fp8+dsa").kv_bytes_per_token, 61 * (656 + 132));
  // Llama-3.1-405B GQA-8: 126 x 2 x 8 x 128 x 2 = 516,096 B (seed 000's "516 KB").
  w.model = "llama-3.1-405b";
  p = make(w);
  EXPECT_EQ(row(p, "gqa-8-bf16").kv_bytes_per_token, 516096);
  // Seed 004's model: MHA 2 x 64 x 7168 x 2, GQA-8 (head dim 56), MLA 64 x 1152.
  EXPECT_EQ(64 * kv_bytes_per_token_layer(M("seed004-64l"), KvFormat::mha_bf16), 1835008);
  EXPECT_EQ(64 * kv_bytes_per_token_layer(M("seed004-64l"), KvFormat::gqa_bf16), 114688);
  EXPECT_EQ(64 * kv_bytes_per_token_layer(M("seed004-64l"), KvFormat::mla_bf16), 73728);
  EXPECT_EQ(27 * kv_bytes_per_token_layer(M("deepseek-v2-lite"), KvFormat::mla_bf16), 31104);
}

TEST(Plan, TensorParallelSplitsGqaButReplicatesMla) {
  Workload w;
  w.model = "llama-3.1-405b";
  w.tp = 4;
  w.batch = 1;
  Plan p = make(w);
  EXPECT_EQ(p.heads_per_gpu, 32);
  EXPECT_EQ(row(p, "gqa-8-bf16").kv_bytes_per_token, 126 * 2 * 2 * 128 * 2);  // 2 KV heads/rank
  w.tp = 16;  // more ranks than KV heads: one (replicated) head per rank
  p = make(w);
  EXPECT_EQ(row(p, "gqa-8-bf16").kv_bytes_per_token, 126 * 1 * 2 * 128 * 2);
  w.model = "deepseek-v3";
  w.tp = 8;
  p = make(w);
  EXPECT_EQ(row(p, "mla-bf16").kv_bytes_per_token, 70272);  // the latent serves every head
}

TEST(Plan, CapacityBesideTheWeights) {
  Workload w;
  w.model = "deepseek-v3.2";
  w.gpu = "h200";
  w.kv = KvPrecision::fp8;
  w.batch = 8;
  Plan p = make(w);
  const double params = 671e9 + 61 * (1536.0 * 64 * 128 + 7168.0 * 128 + 7168.0 * 64);
  const double weights = params * 1.0 / 8;  // FP8 weights over the default 8 shards
  const double free = 141e9 * 0.9 - weights;
  EXPECT_NEAR(p.weights_bytes_per_gpu, weights, 1);
  EXPECT_NEAR(p.free_bytes, free, 1);
  const double per_request = 61.0 * (656 + 132) * 32768;
  EXPECT_EQ(row(p, "mla-fp8+dsa").max_batch, static_cast<int64_t>(std::floor(free / per_request)));
  EXPECT_EQ(row(p, "mla-fp8+dsa").max_batch, 27);
  EXPECT_TRUE(row(p, "mla-fp8+dsa").batch_fits);

  // Auto batch (0): the largest that fits with the asked precision.
  w.batch = 0;
  p = make(w);
  EXPECT_TRUE(p.batch_auto);
  EXPECT_EQ(p.workload.batch, 27);

  // All 671 GB of V3's weights on one H200: nothing fits; 6 shards are the fewest that leave room.
  w.model = "deepseek-v3";
  w.weight_shards = 1;
  w.batch = 1;
  p = make(w);
  EXPECT_LT(p.free_bytes, 0);
  EXPECT_EQ(row(p, "mla-fp8").max_batch, 0);
  EXPECT_EQ(p.min_weight_shards, 6);  // 671/5 = 134.2 > 126.9 GB usable; 671/6 = 111.8 fits
  bool noted = false;
  for (const std::string& n : p.notes) noted |= n.find(">= 6 GPUs") != std::string::npos;
  EXPECT_TRUE(noted);
}

TEST(Plan, RooflineBinding128HeadsComputeBound16HeadsMemoryBound) {
  Workload w;
  w.model = "deepseek-v3";
  w.gpu = "h200";
  w.batch = 64;
  Plan p = make(w);
  const FormatPlan& f = row(p, "mla-bf16");
  // 2*128*(576+512) FLOP per key over 1152 B: 241.8 FLOP/B > the H200's measured ridge 792/4.391.
  EXPECT_NEAR(f.step.intensity, 2.0 * 128 * 1088 / 1152, 1e-9);
  EXPECT_NEAR(p.ridge_bf16, 792e12 / 4391e9, 1e-9);
  EXPECT_EQ(f.step.binds, "compute");
  const double flops = 64.0 * 32768 * 61 * 2 * 128 * 1088;
  EXPECT_NEAR(f.step.flops, flops, flops * 1e-12);
  EXPECT_NEAR(f.step.floor_s, flops / 792e12, 1e-12);
  // Ceilings say where they come from: measured on the H200, datasheet elsewhere.
  EXPECT_TRUE(p.ceilings.read_bw_measured);
  EXPECT_TRUE(p.ceilings.bf16_measured);

  w.tp = 8;  // 16 heads per GPU: 30.2 FLOP/B, memory-bound; time = bytes / read bandwidth
  p = make(w);
  const FormatPlan& g = row(p, "mla-bf16");
  EXPECT_EQ(p.heads_per_gpu, 16);
  EXPECT_NEAR(g.step.intensity, 2.0 * 16 * 1088 / 1152, 1e-9);
  EXPECT_EQ(g.step.binds, "memory");
  EXPECT_NEAR(g.step.floor_s, 64.0 * 32768 * 61 * 1152 / 4391e9, 1e-12);

  // On the H100's datasheet ridge (989.4 / 3.35 = 295) bf16 at 128 heads is memory-bound,
  // while the 656 B fp8 entry (425 FLOP/B) is compute-bound.
  w.gpu = "h100";
  w.tp = 1;
  w.weight_shards = 16;
  p = make(w);
  EXPECT_FALSE(p.ceilings.read_bw_measured);
  EXPECT_EQ(row(p, "mla-bf16").step.binds, "memory");
  EXPECT_EQ(row(p, "mla-fp8").step.binds, "compute");
}

TEST(Plan, DsaStepCountsIndexerTopkAndSparseAttention) {
  Workload w;
  w.model = "deepseek-v3.2";
  w.batch = 16;
  Plan p = make(w);
  const FormatPlan& f = row(p, "mla-fp8+dsa");
  ASSERT_EQ(f.step.stages.size(), 3u);
  const double B = 16, L = 32768, k = 2048, layers = 61;
  EXPECT_DOUBLE_EQ(f.step.stages[0].flops, B * layers * L * 2 * 64 * 128);   // indexer
  EXPECT_DOUBLE_EQ(f.step.stages[0].bytes, B * layers * (L * 132 + L * 4));  // keys + logits
  EXPECT_EQ(f.step.stages[0].compute_ceiling, "fp8");
  EXPECT_DOUBLE_EQ(f.step.stages[2].flops, B * layers * k * 2 * 128 * 1088);  // sparse attention
  EXPECT_DOUBLE_EQ(f.step.stages[2].bytes, B * layers * (k * 656 + k * 4));
  EXPECT_LT(f.step.floor_s, row(p, "mla-fp8").step.floor_s);  // far cheaper than dense at 32K
  // At or below top-k every key is selected: the DSA row is the dense one, indexer skipped.
  w.context = 2048;
  p = make(w);
  EXPECT_EQ(row(p, "mla-fp8+dsa").step.stages.size(), 1u);
  EXPECT_NE(rec(p, "DSA").choice.find("off"), std::string::npos);
}

TEST(Plan, RecommendationsFollowTheWorkload) {
  EXPECT_NEAR(absorbed_breakeven_new_tokens(M("deepseek-v3"), 1, 1), 262144.0 / 1536, 1e-9);
  Workload w;
  w.model = "deepseek-v3";
  w.batch = 8;
  Plan p = make(w);
  EXPECT_EQ(rec(p, "attention form").choice, "absorbed (MQA form)");
  EXPECT_EQ(rec(p, "DSA").choice, "n/a");
  EXPECT_NE(rec(p, "block-sparse").reason.find("NSA"), std::string::npos);
  w.phase = Phase::prefill;  // chunks of thousands of new tokens: the MHA form
  p = make(w);
  EXPECT_EQ(rec(p, "attention form").choice, "non-absorbed (MHA form)");
  EXPECT_EQ(rec(p, "chunk size").choice, "4096");  // 512*256/(320*0.1) = 4096: decompression
  w.model = "deepseek-v3.2";
  w.phase = Phase::decode;
  p = make(w);
  EXPECT_NE(rec(p, "DSA").choice.find("on"), std::string::npos);
  EXPECT_EQ(rec(p, "top-k").choice, "2048");
  w.topk = 1024;
  p = make(w);
  EXPECT_NE(rec(p, "top-k").reason.find("trained with 2048"), std::string::npos);
  // KV precision: compute-bound and fitting -> bf16; memory-bound (16 heads) -> fp8.
  w = Workload{};
  w.model = "deepseek-v3";
  w.batch = 4;
  p = make(w);
  EXPECT_EQ(rec(p, "KV precision").choice.rfind("bf16", 0), 0u);
  w.tp = 8;
  p = make(w);
  EXPECT_EQ(rec(p, "KV precision").choice.rfind("fp8", 0), 0u);
  for (const Recommendation& r : p.recommendations) EXPECT_FALSE(r.reason.empty()) << r.item;
}

TEST(Plan, JsonHasTheKeys) {
  Workload w;
  Plan p = make(w);
  const auto j = nlohmann::json::parse(render_json(p));
  for (const char* k : {"workload", "gpu", "model", "ceilings", "capacity", "formats",
                        "recommendations", "notes", "calibrated"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["workload"]["model"], "deepseek-v3.2");
  EXPECT_EQ(j["workload"]["gpu"], "h200");
  EXPECT_EQ(j["ceilings"]["read_bw_from"], "measured");
  EXPECT_TRUE(j["gpu"].contains("measured"));
  ASSERT_FALSE(j["formats"].empty());
  for (const char* k : {"name", "cache_bytes_per_token_layer", "indexer_bytes_per_token_layer",
                        "kv_bytes_per_token", "kv_bytes_per_request", "max_batch", "step"})
    EXPECT_TRUE(j["formats"][0].contains(k)) << k;
  for (const char* k : {"flops", "bytes", "intensity", "floor_s", "binds", "predicted_s", "stages"})
    EXPECT_TRUE(j["formats"][0]["step"].contains(k)) << k;
  for (const auto& r : j["recommendations"]) {
    EXPECT_TRUE(r.contains("item"));
    EXPECT_FALSE(r["reason"].get<std::string>().empty());
  }
  w.gpu = "b200";
  EXPECT_EQ(nlohmann::json::parse(render_json(make(w)))["ceilings"]["read_bw_from"], "datasheet");
  const std::string text = render_text(make(Workload{}));
  EXPECT_NE(text.find("Recommended configuration"), std::string::npos);
}

TEST(Plan, UnknownNamesListTheKnownOnes) {
  const GpuSpec* g = nullptr;
  Status st = find_gpu("a100", &g);
  EXPECT_EQ(st.code(), Errc::invalid_value);
  for (const char* n : {"h100", "h800", "h200", "h20", "b200", "b300"})
    EXPECT_NE(st.message().find(n), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("'a100'"), std::string::npos);
  EXPECT_TRUE(find_gpu("H200", &g).ok());  // case-insensitive
  Workload w;
  w.model = "gpt-4";
  Plan p;
  st = make_plan(w, nullptr, &p);
  EXPECT_EQ(st.code(), Errc::invalid_value);
  for (const char* n :
       {"deepseek-v3", "deepseek-v3.2", "deepseek-v2-lite", "seed004-64l", "llama-3.1-405b"})
    EXPECT_NE(st.message().find(n), std::string::npos) << st.message();
  KvPrecision kv;
  EXPECT_FALSE(parse_kv_precision("int4", &kv).ok());
  Phase ph;
  EXPECT_FALSE(parse_phase("train", &ph).ok());
}

TEST(Plan, BadWorkloadsNameTheValue) {
  auto err = [](Workload w) {
    Plan p;
    return make_plan(w, nullptr, &p);
  };
  Workload w;
  w.tp = 3;
  EXPECT_NE(err(w).message().find("tp = 3"), std::string::npos);
  w = Workload{};
  w.batch = -1;
  EXPECT_NE(err(w).message().find("batch = -1"), std::string::npos);
  w = Workload{};
  w.context = 0;
  EXPECT_NE(err(w).message().find("context = 0"), std::string::npos);
  w = Workload{};
  w.mem_util = 1.5;
  EXPECT_NE(err(w).message().find("mem_util = 1.5"), std::string::npos);
  w = Workload{};
  w.model = "llama-3.1-405b";
  w.kv = KvPrecision::fp8;
  EXPECT_EQ(err(w).code(), Errc::unsupported);
}

constexpr const char* kCalibration = R"({
  "gpu": "h200",
  "source": "test",
  "entries": [
    {"kernel": "decode", "format": "bf16", "h_q": 128, "fraction_of_ceiling": 0.8, "tflops": 634},
    {"kernel": "decode", "format": "bf16", "h_q": 16, "fraction_of_ceiling": 0.9},
    {"kernel": "prefill", "format": "mha", "h_q": 128, "fraction_of_ceiling": 0.6}
  ]})";

TEST(Plan, CalibrationPredictsFromMeasuredFractions) {
  Calibration cal;
  ASSERT_TRUE(parse_calibration(kCalibration, &cal).ok());
  ASSERT_EQ(cal.entries.size(), 3u);
  EXPECT_EQ(cal.find("decode", "bf16", 64)->h_q, 128);  // nearest h_q
  EXPECT_EQ(cal.find("decode", "bf16", 32)->h_q, 16);
  EXPECT_EQ(cal.find("decode", "fp8", 128), nullptr);

  Workload w;
  w.model = "deepseek-v3";
  w.batch = 32;
  const Plan plain = make(w);
  const Plan p = make(w, &cal);
  EXPECT_TRUE(p.calibrated);
  const FormatPlan& f = row(p, "mla-bf16");
  EXPECT_DOUBLE_EQ(f.step.floor_s, row(plain, "mla-bf16").step.floor_s);
  EXPECT_NEAR(f.step.predicted_s, f.step.floor_s / 0.8, 1e-15);
  EXPECT_NE(f.step.stages[0].predicted_from.find("measured 80%"), std::string::npos);
  // No fp8 entry: the fp8 row stays at its floor and says why.
  const FormatPlan& g = row(p, "mla-fp8");
  EXPECT_DOUBLE_EQ(g.step.predicted_s, g.step.floor_s);
  EXPECT_NE(g.step.stages[0].predicted_from.find("no decode fp8 entry"), std::string::npos);
  // Measured efficiencies move the absorbed/non-absorbed break-even: (D/fn) / (A/fa - N/fn).
  const double expect = (262144 / 0.6) / (2176 / 0.8 - 640 / 0.6);
  EXPECT_NEAR(absorbed_breakeven_new_tokens(M("deepseek-v3"), 0.8, 0.6), expect, 1e-9);
  // Decompression priced at its own fraction (the GEMMs run nearer the ceiling).
  EXPECT_NEAR(absorbed_breakeven_new_tokens(M("deepseek-v3"), 0.8, 0.6, 0.9),
              (262144 / 0.9) / (2176 / 0.8 - 640 / 0.6), 1e-9);
  EXPECT_NE(rec(p, "attention form").reason.find("calibrated"), std::string::npos);

  // Through a file, as `mla plan --calibrate FILE` reads it.
  const std::string path = ::testing::TempDir() + "mla_plan_calibration.json";
  std::ofstream(path) << kCalibration;
  Calibration from_file;
  EXPECT_TRUE(load_calibration(path, &from_file).ok());
  EXPECT_EQ(from_file.entries.size(), 3u);
  std::remove(path.c_str());
  EXPECT_FALSE(load_calibration(path, &from_file).ok());
}

TEST(Plan, AttentionAcrossGpusIsABatchSplit) {
  // H200: the measured side-by-side; other GPUs: the paper argument with the GPU's ridge.
  for (const char* gpu : {"h200", "h800"}) {
    Workload w;
    w.gpu = gpu;
    const Plan p = make(w);
    const Recommendation& r = rec(p, "attention across GPUs");
    EXPECT_EQ(r.choice, "batch split (data-parallel attention)");
    EXPECT_NE(r.reason.find(std::string(gpu) == "h200" ? "measured on 2 H200" : "on paper"),
              std::string::npos)
        << r.reason;
  }
}

TEST(Plan, CalibrationOverheadIsChargedPerCall) {
  // One kernel call per layer: 61 x 40 us on top of floor / fraction.
  Calibration cal;
  ASSERT_TRUE(
      parse_calibration(R"({"gpu":"h200","entries":[{"kernel":"decode","format":"bf16","h_q":128,)"
                        R"("fraction_of_ceiling":0.5,"overhead_us":40}]})",
                        &cal)
          .ok());
  EXPECT_DOUBLE_EQ(cal.entries[0].overhead_us, 40);
  Workload w;
  w.batch = 4;
  const Plan p = make(w, &cal);
  const StageCost& s = row(p, "mla-bf16").step.stages[0];
  EXPECT_EQ(s.calls, 61);
  EXPECT_NEAR(s.overhead_s, 61 * 40e-6, 1e-12);
  EXPECT_NEAR(s.predicted_s, 61 * 40e-6 + s.floor_s / 0.5, 1e-12);
  EXPECT_NE(s.predicted_from.find("+ 40.0 us per call"), std::string::npos) << s.predicted_from;
  // Absent: no overhead (the schema's older files keep their meaning).
  ASSERT_TRUE(parse_calibration(kCalibration, &cal).ok());
  EXPECT_EQ(cal.entries[0].overhead_us, 0);
  // Negative or non-numeric overheads are errors naming the field.
  Status st =
      parse_calibration(R"({"gpu":"h200","entries":[{"kernel":"decode","format":"bf16","h_q":128,)"
                        R"("fraction_of_ceiling":0.5,"overhead_us":-3}]})",
                        &cal);
  EXPECT_NE(st.message().find("entries[0].overhead_us = -3"), std::string::npos) << st.message();
  st = parse_calibration(R"({"gpu":"h200","entries":[{"kernel":"decode","format":"bf16","h_q":128,)"
                         R"("fraction_of_ceiling":0.5,"overhead_us":"x"}]})",
                         &cal);
  EXPECT_NE(st.message().find("entries[0].overhead_us must be a number"), std::string::npos)
      << st.message();
}

TEST(Plan, CalibrationErrorsNameTheField) {
  Calibration cal;
  EXPECT_NE(parse_calibration("{", &cal).message().find("not valid JSON"), std::string::npos);
  EXPECT_NE(parse_calibration(R"({"entries": []})", &cal).message().find("\"gpu\""),
            std::string::npos);
  Status st = parse_calibration(
      R"({"gpu":"h200","entries":[{"kernel":"decode","format":"bf16","h_q":128,"fraction_of_ceiling":1.5}]})",
      &cal);
  EXPECT_NE(st.message().find("entries[0].fraction_of_ceiling = 1.5"), std::string::npos)
      << st.message();
  st = parse_calibration(
      R"({"gpu":"h200","entries":[{"kernel":"gemm","format":"bf16","h_q":128,"fraction_of_ceiling":0.5}]})",
      &cal);
  EXPECT_NE(st.message().find("kernel = 'gemm'"), std::string::npos) << st.message();
  st = parse_calibration(R"({"gpu":"h200","entries":[{"kernel":"decode","format":"bf16"}]})", &cal);
  EXPECT_NE(st.message().find("entries[0].h_q"), std::string::npos) << st.message();
  // A calibration for another GPU is refused.
  ASSERT_TRUE(parse_calibration(kCalibration, &cal).ok());
  Workload w;
  w.gpu = "h100";
  Plan p;
  EXPECT_NE(make_plan(w, &cal, &p).message().find("does not match"), std::string::npos);
}

const SeedCheckRow& seed_row(const std::vector<SeedCheckRow>& rows, const std::string& seed,
                             const std::string& where) {
  for (const SeedCheckRow& r : rows)
    if (r.seed == seed && r.where.find(where) != std::string::npos) return r;
  ADD_FAILURE() << "no seed row " << seed << " " << where;
  return rows.front();
}

TEST(Plan, SeedCheckVerdicts) {
  const auto rows = seed_check();
  // 004: 38.6 GB in 6.2 ms on a 3.35 TB/s H800 is 6.2 TB/s; 16 x 9.66 GB > 80 GB.
  const auto& t = seed_row(rows, "004", "MLA 128K: decode step time");
  EXPECT_EQ(t.verdict, "impossible");
  EXPECT_NE(t.reason.find("6.23 TB/s"), std::string::npos) << t.reason;
  EXPECT_EQ(seed_row(rows, "004", "MLA 128K: max batch").verdict, "impossible");
  EXPECT_NE(seed_row(rows, "004", "MLA 128K: max batch").reason.find("154.62 GB"),
            std::string::npos);
  EXPECT_EQ(seed_row(rows, "004", "MLA vs GQA-8").verdict, "wrong");
  EXPECT_EQ(seed_row(rows, "004", "MLA vs GQA-8").ours, "1.56x");
  EXPECT_EQ(seed_row(rows, "004", "MLA 8K: KV per request").verdict, "right");
  EXPECT_EQ(seed_row(rows, "004", "GQA-8 128K: decode step time").verdict, "plausible");
  EXPECT_EQ(seed_row(rows, "004", "MLA 8K: arithmetic intensity").verdict, "wrong");
  // 000: the 93.3% claim, the 576 B FP8 entry, the blanket "memory-bound".
  const auto& r = seed_row(rows, "000", "reduction 516 KB");
  EXPECT_EQ(r.verdict, "wrong");
  EXPECT_NE(r.ours.find("86.4%"), std::string::npos) << r.ours;
  EXPECT_EQ(seed_row(rows, "000", "MLA entry per layer, FP8").verdict, "wrong");
  EXPECT_EQ(seed_row(rows, "000", "DeepSeek-V3 MLA KV per token").verdict, "right");
  EXPECT_EQ(seed_row(rows, "000", "decode is memory-bound").verdict, "wrong");
  EXPECT_EQ(seed_row(rows, "000", "h100 HBM bandwidth").verdict, "right");
  for (const SeedCheckRow& x : rows) EXPECT_FALSE(x.reason.empty()) << x.where;
  const auto j = nlohmann::json::parse(render_seed_check_json(rows));
  EXPECT_EQ(j.size(), rows.size());
}

}  // namespace
}  // namespace mla::plan
