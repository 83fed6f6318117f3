// The DSA decode step (mla/dsa.hpp) on the CPU: the dispatch rule; k >= L
// equals dense decode (exactly on the dense path, within fp64 rounding when the
// sparse path is forced); end to end equals the pipeline written out here stage
// by stage (indexer logits -> top-k -> sparse attention) bit for bit, over
// s_q 1-4, lengths 0, below a page, below k and above it, mixed in one batch,
// both cache formats, shared and separate block tables; validation messages;
// and the planner's threshold.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/dsa_step_problem.hpp"
#include "common/expect_status.hpp"
#include "mla/dsa.hpp"
#include "mla/plan.hpp"
#include "mla/sparse.hpp"
#include "mla/topk.hpp"

namespace mla {
namespace {

using testing::DsaStepProblem;
using testing::DsaStepShape;
using testing::expect_error;
using testing::HostTensor;
using testing::Rng;
using DsaRow = testing::BadRow<DsaDecodeArgs>;
using ThresholdRow = testing::BadRow<plan::DsaThresholdOptions>;

#define MLA_OK(x)                           \
  do {                                      \
    Status s_ = (x);                        \
    ASSERT_TRUE(s_.ok()) << s_.to_string(); \
  } while (0)

struct Outputs {
  HostTensor out, lse;
};

Outputs fresh_outputs(const DsaStepProblem& p) {
  return {p.dense.make_out(DType::f64), p.dense.make_lse(DType::f64)};
}

// Runs the step with a workspace of exactly the size it asks for, poisoned.
Status run_step(const DsaStepProblem& p, const Outputs& o, int64_t max_seqlen,
                const DsaPolicy& pol) {
  const DsaDecodeArgs a = p.args(p.dense.q, o.out, o.lse, max_seqlen);
  size_t bytes = 0;
  MLA_TRY(dsa_decode_workspace_size(a, pol, &bytes));
  std::vector<uint8_t> ws(bytes + 1);
  std::memset(ws.data(), 0xff, ws.size());
  return dsa_decode(a, pol, Workspace{ws.data(), bytes}, {});
}

Outputs dense_decode(const DsaStepProblem& p) {
  Outputs o = fresh_outputs(p);
  Status st = mla_decode(p.dense.args(p.dense.q, o.out, o.lse));
  EXPECT_TRUE(st.ok()) << st.to_string();
  return o;
}

// The reference pipeline, one public op at a time with buffers of its own.
Outputs hand_pipeline(const DsaStepProblem& p, int64_t max_seqlen, int32_t topk) {
  const int64_t B = p.dense.batch(), s_q = p.dense.shape.s_q;
  HostTensor logits(DType::f32, {B, s_q, max_seqlen});
  logits.poison();
  IndexerLogitsDecodeArgs il;
  il.q8 = p.index_q8.view();
  il.w_folded = p.index_w_folded.view();
  il.cache = IndexerCacheView{p.index_cache.view()};
  il.block_table = p.shared_table ? p.dense.cache.block_table_view() : p.index_block_table.view();
  il.cache_seqlens = p.dense.cache.seqlens_view();
  il.logits = logits.view();
  Status st = indexer_logits_decode(il);
  EXPECT_TRUE(st.ok()) << st.to_string();

  HostTensor lengths(DType::i32, {B * s_q});
  for (int64_t r = 0; r < B * s_q; ++r) lengths.set(r, p.dense.shape.lengths[r / s_q]);
  HostTensor indices(DType::i32, {B * s_q, topk});
  indices.poison();
  TopkArgs tk;
  tk.logits = TensorView::make(logits.data(), DType::f32, {B * s_q, max_seqlen});
  tk.lengths = lengths.view();
  tk.k = topk;
  tk.indices = indices.view();
  tk.block_table = p.dense.cache.block_table_view();
  tk.page_size = static_cast<int32_t>(p.dense.shape.cache.page_size);
  tk.rows_per_request = static_cast<int32_t>(s_q);
  tk.num_pages = p.dense.cache.num_pages;
  tk.order = TopkOrder::by_position;  // as the step asks (sparse attention takes any order)
  st = topk_indices(tk);
  EXPECT_TRUE(st.ok()) << st.to_string();

  Outputs o = fresh_outputs(p);
  SparseDecodeArgs sd;
  sd.q = p.dense.q.view();
  sd.kv = p.dense.cache.view();
  sd.indices = TensorView::make(indices.data(), DType::i32, {B, s_q, topk});
  sd.softmax_scale = p.dense.shape.softmax_scale;
  sd.out = o.out.view();
  sd.lse = o.lse.view();
  st = sparse_decode(sd);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return o;
}

void expect_bitwise_equal(const HostTensor& a, const HostTensor& b, const char* what) {
  ASSERT_EQ(a.numel(), b.numel());
  int64_t bad = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.get(i), y = b.get(i);
    if (std::memcmp(&x, &y, sizeof x) != 0 && ++bad <= 3)
      ADD_FAILURE() << what << "[" << i << "]: " << x << " vs " << y;
  }
  EXPECT_EQ(bad, 0) << what;
}

// Forced sparse vs dense when every key is selected: the same terms summed in
// another order. Values and lse are O(1) (|q|, |k| <= 1, scale 576^-0.5-ish),
// so fp64 reassociation stays far below 1e-12.
void expect_close(const HostTensor& a, const HostTensor& b, const char* what) {
  ASSERT_EQ(a.numel(), b.numel());
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.get(i), y = b.get(i);
    if (std::isinf(x) || std::isinf(y)) {
      EXPECT_EQ(x, y) << what << "[" << i << "]";
      continue;
    }
    ASSERT_FALSE(std::isnan(x)) << what << "[" << i << "] is NaN (poison left)";
    EXPECT_NEAR(x, y, 1e-12) << what << "[" << i << "]";
  }
}

// 16 query heads.
DsaStepShape shape_of(std::vector<int32_t> lengths, int64_t s_q, int64_t page_size,
                      KvFormat fmt = KvFormat::bf16, bool shared = false) {
  return testing::dsa_step_shape(std::move(lengths), s_q, 16, page_size, fmt, shared);
}

TEST(DsaStep, DispatchRule) {
  Rng rng(1);
  const DsaStepProblem p = make_dsa_step_problem(rng, shape_of({10}, 1, 64, KvFormat::bf16, true));
  const Outputs o = fresh_outputs(p);
  DsaPolicy pol;
  pol.topk = 128;
  pol.dense_below = 1000;
  auto path_at = [&](int64_t max_seqlen) {
    DsaPath path = DsaPath::automatic;
    Status st = dsa_decode_path(p.args(p.dense.q, o.out, o.lse, max_seqlen), pol, &path);
    EXPECT_TRUE(st.ok()) << st.to_string();
    return path;
  };
  EXPECT_EQ(path_at(0), DsaPath::dense);
  EXPECT_EQ(path_at(128), DsaPath::dense);
  EXPECT_EQ(path_at(1000), DsaPath::dense);  // max(topk, dense_below) is included
  EXPECT_EQ(path_at(1001), DsaPath::sparse);
  pol.dense_below = 0;  // the rule reduces to max_seqlen <= topk
  EXPECT_EQ(path_at(128), DsaPath::dense);
  EXPECT_EQ(path_at(129), DsaPath::sparse);
  pol.path = DsaPath::sparse;
  EXPECT_EQ(path_at(0), DsaPath::sparse);
  pol.path = DsaPath::dense;
  EXPECT_EQ(path_at(1 << 20), DsaPath::dense);

  // The default: the crossover measured on the H200 for the cache's format.
  for (KvFormat f : {KvFormat::bf16, KvFormat::fp8_ds_mla}) {
    const DsaStepProblem q = make_dsa_step_problem(rng, shape_of({10}, 1, 64, f, true));
    const Outputs qo = fresh_outputs(q);
    const int64_t t = f == KvFormat::bf16 ? kDsaDenseBelowH200Bf16 : kDsaDenseBelowH200Fp8;
    for (int64_t len : {t, t + 1}) {
      DsaPath path = DsaPath::automatic;
      MLA_OK(dsa_decode_path(q.args(q.dense.q, qo.out, qo.lse, len), DsaPolicy{}, &path));
      EXPECT_EQ(path, len == t ? DsaPath::dense : DsaPath::sparse)
          << kv_format_name(f) << " " << len;
    }
  }
}

// (a) k >= L: the dispatch takes the dense path and equals mla_decode exactly;
// forcing the sparse path selects every visible key and equals it to fp64
// rounding. Both formats, s_q 1 and 3 (causal among the new tokens).
TEST(DsaStep, TopkAtLeastLengthEqualsDense) {
  Rng rng(2);
  for (KvFormat fmt : {KvFormat::bf16, KvFormat::fp8_ds_mla})
    for (int64_t s_q : {1, 3}) {
      SCOPED_TRACE(::testing::Message() << kv_format_name(fmt) << " s_q " << s_q);
      const DsaStepProblem p =
          make_dsa_step_problem(rng, shape_of({128, 5, 77, 0, 2, 64}, s_q, 16, fmt));
      const Outputs ref = dense_decode(p);
      DsaPolicy pol;
      pol.topk = 128;
      const Outputs step = fresh_outputs(p);
      MLA_OK(run_step(p, step, p.max_len(), pol));
      expect_bitwise_equal(step.out, ref.out, "dense-path out");
      expect_bitwise_equal(step.lse, ref.lse, "dense-path lse");

      pol.path = DsaPath::sparse;
      const Outputs forced = fresh_outputs(p);
      MLA_OK(run_step(p, forced, p.max_len(), pol));
      expect_close(forced.out, ref.out, "forced-sparse out");
      expect_close(forced.lse, ref.lse, "forced-sparse lse");

      // The same through the rule alone: max_seqlen above topk (a loose but valid
      // bound) with dense_below 0 takes the sparse path; every length is <= k.
      pol.path = DsaPath::automatic;
      pol.dense_below = 0;
      const Outputs loose = fresh_outputs(p);
      MLA_OK(run_step(p, loose, 300, pol));
      expect_close(loose.out, ref.out, "loose-bound out");
      expect_close(loose.lse, ref.lse, "loose-bound lse");
    }
}

// (b) + (c) End to end on random data: the step equals the hand pipeline bit
// for bit, over s_q 1-4 and a batch mixing length 0, below s_q, below a page,
// below k, exactly k and far above k; separate (page 16) and shared (page 64)
// block tables; both cache formats.
TEST(DsaStep, EndToEndEqualsHandPipeline) {
  Rng rng(3);
  struct Case {
    int64_t page_size;
    KvFormat fmt;
    bool shared;
  };
  const std::vector<int32_t> lengths = {300, 0, 2, 13, 64, 65, 191};
  for (Case c : {Case{16, KvFormat::bf16, false}, Case{64, KvFormat::fp8_ds_mla, true},
                 Case{64, KvFormat::bf16, false}})
    for (int64_t s_q = 1; s_q <= 4; ++s_q) {
      SCOPED_TRACE(::testing::Message() << "page " << c.page_size << " " << kv_format_name(c.fmt)
                                        << (c.shared ? " shared" : " separate") << " s_q " << s_q);
      const DsaStepProblem p =
          make_dsa_step_problem(rng, shape_of(lengths, s_q, c.page_size, c.fmt, c.shared));
      DsaPolicy pol;
      pol.topk = 64;
      pol.dense_below = 0;
      const int64_t max_seqlen = p.max_len() + 5;  // a bound, not the exact max
      const Outputs step = fresh_outputs(p);
      MLA_OK(run_step(p, step, max_seqlen, pol));
      const Outputs ref = hand_pipeline(p, max_seqlen, pol.topk);
      expect_bitwise_equal(step.out, ref.out, "out");
      expect_bitwise_equal(step.lse, ref.lse, "lse");
      // The sparse path really ran: request 0 (300 keys, 64 chosen) differs from dense.
      const Outputs dense = dense_decode(p);
      double diff = 0;
      for (int64_t i = 0; i < 16 * kDv; ++i)
        diff = std::max(diff, std::abs(step.out.get(i) - dense.out.get(i)));
      EXPECT_GT(diff, 1e-6) << "request 0 looks like dense attention over all 300 keys";
      // Requests whose every query sees at most k keys equal dense (to rounding).
      for (int64_t b = 1; b < static_cast<int64_t>(lengths.size()); ++b) {
        if (lengths[b] > pol.topk) continue;
        for (int64_t i = b * s_q * 16 * kDv; i < (b + 1) * s_q * 16 * kDv; ++i)
          ASSERT_NEAR(step.out.get(i), dense.out.get(i), 1e-12) << "request " << b;
      }
    }
}

// An all-empty batch and max_seqlen 0 on the forced sparse path: out 0, lse -inf.
TEST(DsaStep, EmptyBatchOnSparsePath) {
  Rng rng(4);
  const DsaStepProblem p =
      make_dsa_step_problem(rng, shape_of({0, 0}, 2, 64, KvFormat::bf16, true));
  DsaPolicy pol;
  pol.topk = 64;
  pol.path = DsaPath::sparse;
  const Outputs step = fresh_outputs(p);
  MLA_OK(run_step(p, step, 0, pol));
  for (int64_t i = 0; i < step.out.numel(); ++i) ASSERT_EQ(step.out.get(i), 0.0);
  for (int64_t i = 0; i < step.lse.numel(); ++i)
    ASSERT_EQ(step.lse.get(i), -std::numeric_limits<double>::infinity());
}

// (d) Errors name the argument and the value.
TEST(DsaStep, ValidationErrors) {
  Rng rng(5);
  const DsaStepProblem p = make_dsa_step_problem(rng, shape_of({200, 40}, 1, 16));
  const Outputs o = fresh_outputs(p);
  const DsaDecodeArgs good = p.args(p.dense.q, o.out, o.lse, 200);
  DsaPolicy pol;
  pol.topk = 64;
  pol.dense_below = 0;
  size_t bytes = 0;
  MLA_OK(dsa_decode_workspace_size(good, pol, &bytes));
  std::vector<uint8_t> ws(bytes);
  const Workspace w{ws.data(), bytes};

  DsaDecodeArgs a = good;
  a.max_seqlen = -1;
  expect_error(dsa_decode(a, pol, w), Errc::invalid_value, {"max_seqlen = -1", "negative"});
  a.max_seqlen = 100;  // request 0 has 200 tokens (checked on CPU tensors only)
  expect_error(dsa_decode(a, pol, w), Errc::out_of_range,
               {"cache_seqlens[0] = 200", "max_seqlen = 100"});

  for (int32_t k : {0, 100, 8256}) {
    DsaPolicy bad = pol;
    bad.topk = k;
    expect_error(dsa_decode(good, bad, w), Errc::invalid_value,
                 {fmt::format("policy.topk = {}", k).c_str(), "multiple of 64"});
  }
  DsaPolicy bad = pol;
  bad.dense_below = -5;
  expect_error(dsa_decode(good, bad, w), Errc::invalid_value, {"policy.dense_below = -5"});
  bad.dense_below = kDsaDenseBelowMeasured;  // -1 is the measured default, not an error
  DsaPath path = DsaPath::automatic;
  MLA_OK(dsa_decode_path(good, bad, &path));
  bad = pol;
  bad.path = static_cast<DsaPath>(7);
  expect_error(dsa_decode(good, bad, w), Errc::invalid_value, {"policy.path = 7"});

  const std::string need = fmt::format("needs {} bytes", bytes);
  expect_error(dsa_decode(good, pol, Workspace{ws.data(), bytes - 1}), Errc::insufficient_workspace,
               {fmt::format("{} bytes given", bytes - 1).c_str(), "sparse path", need.c_str()});
  expect_error(dsa_decode(good, pol, Workspace{}), Errc::insufficient_workspace,
               {"0 bytes given (null)", need.c_str()});

  const std::vector<DsaRow> rows = {
      DsaRow(Errc::invalid_dtype, {"index_q8"}, [](auto& a) { a.index_q8.dtype = DType::f32; }),
      DsaRow(Errc::invalid_shape, {"index_w_folded"},
             [](auto& a) { a.index_w_folded.shape[2] = 32; }),
      // latent pages of 16 cannot address the indexer cache
      DsaRow(Errc::invalid_value, {"index_block_table", "kv.page_size() = 16"},
             [](auto& a) { a.index_block_table = TensorView{}; }),
      DsaRow(Errc::invalid_dtype, {"cache_seqlens"},
             [](auto& a) { a.cache_seqlens.dtype = DType::i64; }),
      DsaRow(Errc::invalid_device, {"index_cache"},
             [](auto& a) { a.index_cache.data.device = Device::cuda(0); }),
  };
  testing::expect_errors(
      good, [&](const DsaDecodeArgs& a) { return dsa_decode(a, pol, w); }, rows);
  // The composed ops' own checks still name their arguments: a page id past the pool.
  HostTensor bt = p.index_block_table;
  bt.set(0, 100000);
  a = good;
  a.index_block_table = bt.view();
  expect_error(dsa_decode(a, pol, w), Errc::out_of_range, {"block_table[0][0] = 100000"});
  expect_error(dsa_decode_workspace_size(good, pol, nullptr), Errc::invalid_value, {"bytes"});
}

// ---- the threshold: the planner's crossover --------------------------------------

TEST(DsaThreshold, IsThePlannersCrossover) {
  int64_t t = 0;
  MLA_OK(plan::dsa_dense_threshold("h200", nullptr, &t));
  EXPECT_GT(t, 2048);
  EXPECT_LE(t, 2048 + 64 * 64) << "on the H200's roofline DSA wins soon after top-k";
  // The roofline is optimistic about DSA's small kernels: the measured
  // crossovers (DsaPolicy's default) come later.
  EXPECT_EQ(DsaPolicy{}.dense_below, kDsaDenseBelowMeasured);
  EXPECT_LT(t, kDsaDenseBelowH200Fp8);
  // make_plan's DSA recommendation quotes the same crossover (same cost model; batch cancels).
  plan::Workload w;
  w.gpu = "h200";
  w.context = 131072;
  w.batch = 4;
  plan::Plan pl;
  MLA_OK(plan::make_plan(w, nullptr, &pl));
  bool found = false;
  for (const auto& r : pl.recommendations)
    if (r.item == "DSA") {
      // fmt_int writes thousands separators.
      std::string s = std::to_string(t);
      if (s.size() > 3) s.insert(s.size() - 3, ",");
      found = r.reason.find("cheaper from " + s + " tokens") != std::string::npos;
      EXPECT_TRUE(found) << r.reason << " (expected " << s << ")";
    }
  EXPECT_TRUE(found);
}

TEST(DsaThreshold, CalibratedAndErrors) {
  // Fractions in the schema of bench/results/2026-11-29-h200-calibration.json.
  const char* cal = R"({"gpu": "H200", "source": "test", "entries": [
    {"kernel": "decode", "format": "bf16", "h_q": 128, "fraction_of_ceiling": 0.494},
    {"kernel": "sparse_decode", "format": "bf16", "h_q": 128, "fraction_of_ceiling": 0.139},
    {"kernel": "indexer", "format": "fp8", "h_q": 128, "fraction_of_ceiling": 0.66},
    {"kernel": "topk", "format": "fp32", "h_q": 128, "fraction_of_ceiling": 0.105}]})";
  int64_t roof = 0, calib = 0;
  MLA_OK(plan::dsa_dense_threshold("h200", nullptr, &roof));
  MLA_OK(plan::dsa_dense_threshold("h200", cal, &calib));
  // Sparse attention measured at 14% of its floor vs dense at 49%: DSA pays off later.
  EXPECT_GT(calib, roof);
  // Per-call overheads (the fitted calibration's form): the crossover moves out as the
  // batch shrinks, since the DSA step pays three kernels' overheads against dense's one.
  const char* with_overhead = R"({"gpu": "h200", "entries": [
    {"kernel": "decode", "format": "bf16", "h_q": 128, "fraction_of_ceiling": 0.53, "overhead_us": 40},
    {"kernel": "sparse_decode", "format": "bf16", "h_q": 128, "fraction_of_ceiling": 0.34, "overhead_us": 33},
    {"kernel": "indexer", "format": "fp8", "h_q": 64, "fraction_of_ceiling": 0.71, "overhead_us": 9},
    {"kernel": "topk", "format": "fp32", "h_q": 128, "fraction_of_ceiling": 0.07, "overhead_us": 37}]})";
  int64_t at4 = 0, at64 = 0;
  plan::DsaThresholdOptions ob;
  ob.batch = 4;
  MLA_OK(plan::dsa_dense_threshold("h200", with_overhead, &at4, ob));
  ob.batch = 64;
  MLA_OK(plan::dsa_dense_threshold("h200", with_overhead, &at64, ob));
  EXPECT_GT(at4, at64);
  EXPECT_GT(at64, 2048);
  int64_t fp8 = 0;
  plan::DsaThresholdOptions o;
  o.kv = "fp8";
  MLA_OK(plan::dsa_dense_threshold("h200", nullptr, &fp8, o));
  EXPECT_GT(fp8, 2048);

  int64_t t = 0;
  expect_error(plan::dsa_dense_threshold("h999", nullptr, &t), Errc::invalid_value, {"h999"});
  expect_error(plan::dsa_dense_threshold(nullptr, nullptr, &t), Errc::invalid_value, {"gpu"});
  expect_error(plan::dsa_dense_threshold("b200", cal, &t), Errc::invalid_value,
               {"\"gpu\" = \"H200\"", "b200"});
  o.kv = "fp4";
  expect_error(plan::dsa_dense_threshold("h200", nullptr, &t, o), Errc::invalid_value,
               {"opts.kv = \"fp4\""});
  const std::vector<ThresholdRow> rows = {
      ThresholdRow(Errc::invalid_value, {"opts.topk = 100"}, [](auto& o) { o.topk = 100; }),
      ThresholdRow(Errc::invalid_value, {"opts.heads = 0"}, [](auto& o) { o.heads = 0; }),
      ThresholdRow(Errc::invalid_value, {"opts.batch = 0"}, [](auto& o) { o.batch = 0; }),
  };
  testing::expect_errors(
      plan::DsaThresholdOptions{},
      [&](const plan::DsaThresholdOptions& o) {
        return plan::dsa_dense_threshold("h200", nullptr, &t, o);
      },
      rows);
  expect_error(plan::dsa_dense_threshold("h200", "{not json", &t), Errc::invalid_value, {});
}

}  // namespace
}  // namespace mla
