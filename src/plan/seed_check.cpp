// `mla plan --seed-check`: recomputes the tables of seeds 000 and 004 from our GPU
// and model tables and says, row by row, where they are right and where they are
// physically impossible. Every "ours" number below is computed, not typed in.
#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "plan/internal.hpp"

namespace mla::plan {
namespace {

using detail::fmt_bytes;
using detail::fmt_int;
using detail::fmt_time;

const ModelSpec& model(const char* n) {
  const ModelSpec* m = nullptr;
  (void)find_model(n, &m);  // names below are the table's own
  return *m;
}
const GpuSpec& gpu(const char* n) {
  const GpuSpec* g = nullptr;
  (void)find_gpu(n, &g);
  return *g;
}

// Seeds round to 2-3 digits: within 3% is "right".
constexpr double kRoundingTolerance = 0.03;
bool close(double claim, double ours) {
  return std::fabs(claim - ours) <= kRoundingTolerance * std::fabs(ours);
}

struct Rows {
  std::vector<SeedCheckRow> v;
  void add(const char* seed, std::string where, std::string claim, std::string ours,
           const char* verdict, std::string reason) {
    v.push_back(
        {seed, std::move(where), std::move(claim), std::move(ours), verdict, std::move(reason)});
  }
  // A plain arithmetic claim: right when within rounding, wrong otherwise.
  void number(const char* seed, std::string where, std::string claim, double claimed, double ours,
              std::string ours_text, std::string reason_if_wrong) {
    const bool ok = close(claimed, ours);
    add(seed, std::move(where), std::move(claim), std::move(ours_text), ok ? "right" : "wrong",
        ok ? "matches within rounding" : std::move(reason_if_wrong));
  }
};

void seed004(Rows& r) {
  const ModelSpec& m = model("seed004-64l");
  const GpuSpec& h800 = gpu("h800");
  const double layers = m.layers;
  const double mha = layers * kv_bytes_per_token_layer(m, KvFormat::mha_bf16);
  const double gqa = layers * kv_bytes_per_token_layer(m, KvFormat::gqa_bf16);
  const double mla = layers * kv_bytes_per_token_layer(m, KvFormat::mla_bf16);
  const double L128 = 131072, L8 = 8192;
  const char* S = "004";

  r.number(S, "MHA KV per token (64 layers x 2 x 7168 x 2 B)", "1.835 MB", 1.835e6, mha,
           fmt_int(int64_t(mha)) + " B", "");
  r.number(S, "MHA KV of one 128K request", "240.6 GB", 240.6e9, mha * L128, fmt_bytes(mha * L128),
           "");
  r.add(S, "MHA 128K: one request needs 3 x 80 GB GPUs", "3 GPUs",
        fmt::format("{:.3f} x 80 GB", mha * L128 / 80e9), "wrong",
        fmt::format("{} > 240 GB: 4 GPUs for the KV alone, before any weights",
                    fmt_bytes(mha * L128)));
  r.number(S, "GQA-8 KV of one 128K request", "15 GB", 15e9, gqa * L128, fmt_bytes(gqa * L128), "");
  r.number(S, "GQA-8 128K read time on an H800 (3.35 TB/s)", "4.47 ms", 4.47e-3,
           gqa * L128 / h800.hbm_bw, fmt_time(gqa * L128 / h800.hbm_bw), "");
  r.number(S, "GQA-8 128K, batch 8: bytes per step", "120 GB", 120e9, 8 * gqa * L128,
           fmt_bytes(8 * gqa * L128), "");
  r.number(S, "MLA entry per layer ((512 + 64) x 2 B)", "1152 B", 1152,
           kv_bytes_per_token_layer(m, KvFormat::mla_bf16), "1,152 B", "");
  r.number(S, "MLA KV per token (64 x 1152)", "73.7 KB", 73.7e3, mla, fmt_int(int64_t(mla)) + " B",
           "");
  r.number(S, "MLA vs MHA", "25x smaller", 25, mha / mla, fmt::format("{:.1f}x", mha / mla), "");
  r.number(S, "MLA vs GQA-8", "3.3x smaller", 3.3, gqa / mla, fmt::format("{:.2f}x", gqa / mla),
           fmt::format("{} / {} B per token: 3.3x would need GQA-4 or an FP8 MLA cache",
                       fmt_int(int64_t(gqa)), fmt_int(int64_t(mla))));
  r.number(S, "MLA KV of one 128K request", "9.6 GB", 9.6e9, mla * L128, fmt_bytes(mla * L128), "");

  // The H800 table: GQA-8 8K, GQA-8 128K, MLA 8K, MLA 128K; batch 4 for the per-step rows.
  struct Col {
    const char* name;
    double per_token;
    double L;
    double kv_claim, batch_claim, step_claim, ai_claim, ms_claim;
    KvFormat f;
  };
  const Col cols[] = {
      {"GQA-8 8K", gqa, L8, 0.94e9, 64, 3.76e9, 12.8, 2.1e-3, KvFormat::gqa_bf16},
      {"GQA-8 128K", gqa, L128, 15.1e9, 4, 60.4e9, 4.1, 22.8e-3, KvFormat::gqa_bf16},
      {"MLA 8K", mla, L8, 0.60e9, 80, 2.40e9, 24.6, 1.4e-3, KvFormat::mla_bf16},
      {"MLA 128K", mla, L128, 9.66e9, 16, 38.6e9, 18.2, 6.2e-3, KvFormat::mla_bf16},
  };
  const double B = 4;
  double floor_gqa128 = 0, floor_mla128 = 0;
  for (const Col& c : cols) {
    const double kv = c.per_token * c.L;
    r.number(S, fmt::format("table, {}: KV per request", c.name),
             fmt::format("{:g} GB", c.kv_claim / 1e9), c.kv_claim, kv, fmt_bytes(kv), "");
    // Largest batch on an 80 GB card even with no weights and no runtime reserve.
    const int64_t bound = static_cast<int64_t>(std::floor(h800.hbm_bytes / kv));
    if (c.batch_claim <= bound)
      r.add(S, fmt::format("table, {}: max batch on an 80 GB H800", c.name),
            fmt::format("{}", c.batch_claim), fmt::format("<= {} (KV only)", bound), "plausible",
            fmt::format("{:.0f} x {} = {} leaves {} for weights and runtime", c.batch_claim,
                        fmt_bytes(kv), fmt_bytes(c.batch_claim * kv),
                        fmt_bytes(h800.hbm_bytes - c.batch_claim * kv)));
    else
      r.add(S, fmt::format("table, {}: max batch on an 80 GB H800", c.name),
            fmt::format("{}", c.batch_claim), fmt::format("<= {} (KV only)", bound), "impossible",
            fmt::format("{:.0f} x {} = {} of KV > {} of HBM", c.batch_claim, fmt_bytes(kv),
                        fmt_bytes(c.batch_claim * kv), fmt_bytes(h800.hbm_bytes)));
    r.number(S, fmt::format("table, {}: HBM bytes per step, batch 4", c.name),
             fmt::format("{:g} GB", c.step_claim / 1e9), c.step_claim, B * kv, fmt_bytes(B * kv),
             "");
    // Attention's arithmetic intensity: 128 query heads; FLOPs and bytes both scale with L.
    const Ceilings ceil = ceilings_for(h800);
    const detail::StepShape shape{4, static_cast<int64_t>(c.L), 1, m.heads, 1, 0, false};
    const StepCost st = detail::step_cost(m, c.f, false, shape, ceil, nullptr);
    r.add(S, fmt::format("table, {}: arithmetic intensity", c.name),
          fmt::format("{:g} FLOP/B", c.ai_claim), fmt::format("{:.1f} FLOP/B", st.intensity),
          "wrong",
          "attention's FLOPs and bytes both grow with L, so its intensity cannot change with "
          "context; ours: 2*h*(d_k+d_v) FLOP per key over the bytes of one cache entry");
    const double bw_needed = B * kv / c.ms_claim;
    if (c.ms_claim >= st.floor_s)
      r.add(S, fmt::format("table, {}: decode step time on an H800", c.name), fmt_time(c.ms_claim),
            fmt::format("floor {}", fmt_time(st.floor_s)), "plausible",
            fmt::format("above the roofline floor ({:.0f}% of it; {:.2f} TB/s of 3.35)",
                        100 * st.floor_s / c.ms_claim, bw_needed / 1e12));
    else
      r.add(S, fmt::format("table, {}: decode step time on an H800", c.name), fmt_time(c.ms_claim),
            fmt::format("floor {}", fmt_time(st.floor_s)), "impossible",
            fmt::format("{} in {} = {:.2f} TB/s > the H800's {:.2f} TB/s", fmt_bytes(B * kv),
                        fmt_time(c.ms_claim), bw_needed / 1e12, h800.hbm_bw / 1e12));
    if (c.L == L128) (c.f == KvFormat::gqa_bf16 ? floor_gqa128 : floor_mla128) = st.floor_s;
  }
  r.add(S, "MLA 128K step vs GQA-8 128K step", "27% (6.2 / 22.8 ms)",
        fmt::format("{:.0f}% (floors {} / {})", 100 * floor_mla128 / floor_gqa128,
                    fmt_time(floor_mla128), fmt_time(floor_gqa128)),
        "wrong",
        "both are memory-bound at batch 4, so the ratio is the cache-size ratio (1 / 1.56); 27% "
        "rests on the impossible 6.2 ms");
}

void seed000(Rows& r) {
  const ModelSpec& v3 = model("deepseek-v3");
  const ModelSpec& llama = model("llama-3.1-405b");
  const char* S = "000";
  const double v3_bf16 = v3.layers * kv_bytes_per_token_layer(v3, KvFormat::mla_bf16);
  const double v3_fp8 = v3.layers * kv_bytes_per_token_layer(v3, KvFormat::mla_fp8);
  const double ll = llama.layers * kv_bytes_per_token_layer(llama, KvFormat::gqa_bf16);
  const double ll_mha = llama.layers * kv_bytes_per_token_layer(llama, KvFormat::mha_bf16);

  r.add(S, "1.1: MHA KV per token of Llama-3.1-405B", "~516 KB (called MHA)",
        fmt::format("{} B (GQA-8)", fmt_int(int64_t(ll))), "approx",
        fmt::format("the number is right but Llama-3.1-405B is GQA with 8 KV heads; its MHA form "
                    "would cache {}",
                    fmt_bytes(ll_mha)));
  r.number(S, "1.1: DeepSeek-V3 MLA KV per token", "~70 KB", 70e3, v3_bf16,
           fmt::format("{} B (61 x 1152)", fmt_int(int64_t(v3_bf16))), "");
  r.add(S, "1.1: reduction 516 KB -> 70 KB", "93.3%",
        fmt::format("{:.1f}% (bf16), {:.1f}% (fp8, 656 B)", 100 * (1 - v3_bf16 / ll),
                    100 * (1 - v3_fp8 / ll)),
        "wrong",
        "70/516 is an 86% cut; 93% needs a 35 KB cache, i.e. a 576 B FP8 entry, which "
        "does not exist (656 B)");
  r.number(S, "4.1: MLA entry per layer, bf16", "1,152 B", 1152,
           kv_bytes_per_token_layer(v3, KvFormat::mla_bf16), "1,152 B", "");
  r.number(S, "4.1 / 5.3: MLA entry per layer, FP8", "~576 B", 576,
           kv_bytes_per_token_layer(v3, KvFormat::mla_fp8), "656 B (fp8_ds_mla)",
           "512 e4m3 latents + 4 fp32 scales + 64 bf16 rope = 656 B: the rope stays bf16 and the "
           "scales cost 16 B");
  const double mha_entry = kv_bytes_per_token_layer(v3, KvFormat::mha_bf16);
  r.add(S, "4.1: MHA-equivalent entry per layer", "65,536 B (128 x 128 x 2 x 2)",
        fmt::format("{} B", fmt_int(int64_t(mha_entry))), "approx",
        "V3's decompressed K has 192 dims per head (128 nope + 64 rope), V 128: 128 x 320 x 2");
  r.add(S, "4.1: compression, bf16", "57:1", fmt::format("{:.0f}:1", mha_entry / 1152), "approx",
        "57:1 is right on the seed's 65,536 B; with V3's real K/V dims it is larger");
  r.number(S, "4.1: compression, FP8", "114:1", 114,
           mha_entry / kv_bytes_per_token_layer(v3, KvFormat::mla_fp8),
           fmt::format("{:.0f}:1", mha_entry / kv_bytes_per_token_layer(v3, KvFormat::mla_fp8)),
           fmt::format("uses the 576 B FP8 entry; with the real 656 B it is {:.0f}:1 on the seed's "
                       "65,536 B and {:.0f}:1 on V3's real K/V",
                       65536.0 / kv_bytes_per_token_layer(v3, KvFormat::mla_fp8),
                       mha_entry / kv_bytes_per_token_layer(v3, KvFormat::mla_fp8)));
  r.number(S, "5.3: MLA entry per layer, FP4", "~288 B", 288,
           kv_bytes_per_token_layer(v3, KvFormat::mla_fp4), "416 B (on paper)",
           "288 = 576 / 2 ignores scales (one e4m3 per 16 values: 32 B) and the bf16 rope (128 B)");
  {
    const double L = 32768, k = 1024, e8 = kv_bytes_per_token_layer(v3, KvFormat::mla_fp8);
    const double idx = model("deepseek-v3.2").indexer_bytes_per_token;
    const double attn_only = 1 - k / L;
    const double total = 1 - (k * e8 + L * idx) / (L * e8);
    r.add(S, "4.2: DSA at L 32K, k 1024 cuts KV reads", "~97%",
          fmt::format("{:.1f}% of attention's reads; {:.1f}% with the indexer (fp8)",
                      100 * attn_only, 100 * total),
          "approx",
          "the indexer reads 132 B of every one of the L keys each step; V3.2's top-k is 2048, "
          "not 1024");
  }

  // Section 2's GPU table against ours.
  struct Claim {
    const char* gpu;
    const char* what;
    double claimed, ours;
    const char* unit;
  };
  const GpuSpec &h100 = gpu("h100"), &h800 = gpu("h800"), &b200 = gpu("b200"), &b300 = gpu("b300");
  const Claim claims[] = {
      {"h100", "HBM", 80, h100.hbm_bytes / 1e9, "GB"},
      {"h100", "HBM bandwidth", 3.35, h100.hbm_bw / 1e12, "TB/s"},
      {"h100", "FP16 dense", 990, h100.bf16_flops / 1e12, "TFLOP/s"},
      {"h100", "FP8 dense", 1979, h100.fp8_flops / 1e12, "TFLOP/s"},
      {"h100", "NVLink", 900, h100.nvlink_bw / 1e9, "GB/s"},
      {"h800", "NVLink", 400, h800.nvlink_bw / 1e9, "GB/s"},
      {"b200", "HBM", 192, b200.hbm_bytes / 1e9, "GB"},
      {"b200", "HBM bandwidth", 8.0, b200.hbm_bw / 1e12, "TB/s"},
      {"b200", "FP16 dense", 2250, b200.bf16_flops / 1e12, "TFLOP/s"},
      {"b200", "FP8 dense", 4500, b200.fp8_flops / 1e12, "TFLOP/s"},
      {"b200", "FP4 dense", 9000, b200.fp4_flops / 1e12, "TFLOP/s"},
      {"b300", "HBM", 288, b300.hbm_bytes / 1e9, "GB"},
      {"b300", "HBM bandwidth", 8.0, b300.hbm_bw / 1e12, "TB/s"},
      {"b300", "FP16 dense", 2500, b300.bf16_flops / 1e12, "TFLOP/s"},
      {"b300", "FP8 dense", 5000, b300.fp8_flops / 1e12, "TFLOP/s"},
      {"b300", "FP4 dense", 10000, b300.fp4_flops / 1e12, "TFLOP/s"},
  };
  for (const Claim& c : claims) {
    const bool ok = close(c.claimed, c.ours);
    std::string reason = ok ? "matches the datasheet within rounding"
                            : fmt::format("datasheet: {}", gpu(c.gpu).source);
    if (!ok && std::string_view(c.what) == "HBM" && std::string_view(c.gpu) == "b200")
      reason = "192 GB is the announced physical capacity; HGX/DGX B200 expose 180 GB per GPU";
    if (!ok && std::string_view(c.gpu) == "b300")
      reason = fmt::format(
          "HGX B300 datasheet per GPU: {:g}; the seed's round figures look like "
          "the liquid-cooled GB300 NVL72's (rack / 72)",
          c.ours);
    r.add(S, fmt::format("2: {} {}", c.gpu, c.what), fmt::format("{:g} {}", c.claimed, c.unit),
          fmt::format("{:g} {}", c.ours, c.unit), ok ? "right" : "approx", reason);
  }
  r.add(S, "2: B200 / B300 die", "GB202", "B200 / B300 (Blackwell datacenter dies)", "wrong",
        "GB202 is the consumer RTX 50 die");
  r.add(S, "2: the table's GPUs", "H100, H800, B200, B300", "+ H200 (141 GB, 4.8 TB/s), H20",
        "approx", "the H200 (H100 compute, 1.76x the memory, 1.43x the bandwidth) is missing");
  r.number(S, "2: Blackwell vs Hopper HBM bandwidth", "2.4x", 2.4, b200.hbm_bw / h100.hbm_bw,
           fmt::format("{:.2f}x", b200.hbm_bw / h100.hbm_bw), "");
  r.number(S, "2: Blackwell vs Hopper FP8", "2.3x", 2.3, b200.fp8_flops / h100.fp8_flops,
           fmt::format("{:.2f}x", b200.fp8_flops / h100.fp8_flops), "");

  // Section 4: "decode is memory-bound". 128 heads, absorbed: 2*128*1088 FLOP per key.
  {
    const double flop_per_key = 2.0 * 128 * (576 + 512);
    const double ai16 = flop_per_key / kv_bytes_per_token_layer(v3, KvFormat::mla_bf16);
    const double ai8 = flop_per_key / kv_bytes_per_token_layer(v3, KvFormat::mla_fp8);
    std::string per_gpu;
    for (const GpuSpec& g : known_gpus()) {
      const Ceilings c = ceilings_for(g);
      const double ridge = c.bf16_flops / c.read_bw;
      per_gpu +=
          fmt::format("{}{} ridge {:.0f}{}: bf16 {}, fp8 {}", per_gpu.empty() ? "" : "; ", g.name,
                      ridge, c.read_bw_measured ? " (measured)" : "",
                      ai16 > ridge ? "compute" : "memory", ai8 > ridge ? "compute" : "memory");
    }
    r.add(S, "4: decode is memory-bound", "memory-bound (all GPUs)",
          fmt::format("128 heads: {:.0f} FLOP/B (bf16), {:.0f} (fp8)", ai16, ai8), "wrong",
          "with 128 heads per GPU the absorbed kernel sits near or above the ridge, and with the "
          "FP8 cache the seed itself recommends it is compute-bound on every GPU: " +
              per_gpu + "; it is memory-bound at <= 64 heads per GPU (tensor parallel)");
  }

  // Section 7.2 / 8.3: max batch scales with HBM (B200 2.4x, B300 3.6x an H100).
  {
    std::vector<std::pair<const char*, int64_t>> fits;
    for (const char* g : {"h100", "b200", "b300"}) {
      Workload w;
      w.model = "deepseek-v3";
      w.gpu = g;
      w.kv = KvPrecision::fp8;
      Plan p;
      if (!make_plan(w, nullptr, &p).ok()) continue;
      for (const FormatPlan& f : p.formats)
        if (f.format == KvFormat::mla_fp8 && f.native) fits.emplace_back(g, f.max_batch);
    }
    std::string ours;
    for (auto& [g, n] : fits) ours += fmt::format("{}{} {}", ours.empty() ? "" : ", ", g, n);
    r.add(S, "7.2 / 8.3: max decode batch vs H100", "B200 2.4x, B300 3.6x",
          ours + " (DeepSeek-V3, fp8 KV, 32K, weights over 8 GPUs)", "wrong",
          "batch is (HBM - weights) / KV per request, not HBM / KV: 671 GB of FP8 weights over 8 "
          "H100s leave no room at all");
  }
  r.add(S, "1.2 / 6: DSA parameters (block 32, stride 16, 16 blocks, window 512...)",
        "DSA's parameters", "NSA's (arXiv 2502.11089)", "wrong",
        "DSA in DeepSeek-V3.2 is token-level: a 64-head FP8 indexer and top-2048 tokens, no "
        "blocks, no window; we build both under their own names");
}

}  // namespace

std::vector<SeedCheckRow> seed_check() {
  Rows r;
  seed000(r);
  seed004(r);
  return std::move(r.v);
}

std::string render_seed_check_text(const std::vector<SeedCheckRow>& rows) {
  std::string o;
  int counts[5] = {0, 0, 0, 0, 0};
  const char* names[5] = {"right", "plausible", "approx", "wrong", "impossible"};
  for (const SeedCheckRow& r : rows) {
    for (int i = 0; i < 5; ++i)
      if (r.verdict == names[i]) ++counts[i];
    o += fmt::format("[{}] {:<10} {}\n      seed: {}\n      ours: {}\n      why:  {}\n", r.seed,
                     r.verdict, r.where, r.claim, r.ours, r.reason);
  }
  o += fmt::format("\n{} rows: {} right, {} plausible, {} approx, {} wrong, {} impossible\n",
                   rows.size(), counts[0], counts[1], counts[2], counts[3], counts[4]);
  return o;
}

std::string render_seed_check_json(const std::vector<SeedCheckRow>& rows) {
  nlohmann::json j = nlohmann::json::array();
  for (const SeedCheckRow& r : rows)
    j.push_back({{"seed", r.seed},
                 {"where", r.where},
                 {"claim", r.claim},
                 {"ours", r.ours},
                 {"verdict", r.verdict},
                 {"reason", r.reason}});
  return j.dump(2);
}

}  // namespace mla::plan
