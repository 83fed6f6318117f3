// The bad-input table (issue 20): each repro of the campaign as a test. Sizes
// that overflow, outputs that overlap, empty batches, non-finite values and
// the names errors give. Every failure must be a typed error naming the
// argument and its value as given; every empty input a no-op.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/checked.hpp"
#include "common/decode_problem.hpp"
#include "common/dsa_step_problem.hpp"
#include "common/expect_status.hpp"
#include "common/random.hpp"
#include "mla/block_sparse.hpp"
#include "mla/c_api.h"
#include "mla/decode.hpp"
#include "mla/dsa.hpp"
#include "mla/indexer.hpp"
#include "mla/kv_cache.hpp"
#include "mla/layer.hpp"
#include "mla/plan.hpp"
#include "mla/prefill.hpp"
#include "mla/rope.hpp"
#include "mla/sparse.hpp"
#include "mla/topk.hpp"
#include "mla/transfer.hpp"
#include "reference/fp8_quant.hpp"
#include "reference/indexer_ref.hpp"

namespace mla {
namespace {

using testing::DecodeProblem;
using testing::DecodeShape;
using testing::DsaStepProblem;
using testing::DsaStepShape;
using testing::expect_error;
using testing::HostTensor;
using testing::Rng;

constexpr int64_t k2p62 = int64_t(1) << 62;
const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

// ---- checked arithmetic ------------------------------------------------------------

TEST(BadInputs, CheckedArithmeticNamesTheOperands) {
  int64_t r = 0;
  EXPECT_TRUE(detail::checked_product({3, 5, 7}, "x", &r).ok());
  EXPECT_EQ(r, 105);
  expect_error(detail::checked_product({8, k2p62}, "max_seqlen = 4611686018427387904: logits", &r),
               Errc::invalid_value,
               {"max_seqlen = 4611686018427387904", "8 * 4611686018427387904"});
  expect_error(detail::checked_sum({INT64_MAX, 1}, "end", &r), Errc::invalid_value,
               {"end", "9223372036854775807 + 1"});
  expect_error(detail::checked_round_up(INT64_MAX - 3, 64, "row", &r), Errc::invalid_value,
               {"row"});
  int32_t i = 0;
  expect_error(detail::checked_int32(int64_t(1) << 31, "k", &i), Errc::invalid_value,
               {"k = 2147483648"});
  detail::ByteLayout lay(256);
  int64_t off = 0;
  ASSERT_TRUE(lay.add({3, 4}, "a", &off).ok());
  ASSERT_TRUE(lay.add({1}, "b", &off).ok());
  EXPECT_EQ(off, 256);
  EXPECT_EQ(lay.bytes(), 257);
  expect_error(lay.add({k2p62, 4}, "c", &off), Errc::invalid_value, {"c"});
}

// ---- view extents ------------------------------------------------------------------

// A decode problem small enough to poke at.
struct Decode {
  DecodeProblem p;
  HostTensor out, lse;
  Decode(std::vector<int32_t> lengths = {5, 40, 0}, int64_t s_q = 2) {
    DecodeShape s;
    s.s_q = s_q;
    s.h_q = 16;
    s.lengths = std::move(lengths);
    s.cache.page_size = 16;
    Rng rng(7);
    p = testing::make_decode_problem(rng, s);
    out = p.make_out(DType::f32);
    lse = p.make_lse(DType::f32);
  }
  DecodeArgs args() const { return p.args(p.q, out, lse); }
};

TEST(BadInputs, ElementCountOverflowIsAnError) {
  Decode d;
  DecodeArgs a = d.args();
  a.q.shape[0] = k2p62;  // B * s_q * h_q * 576 elements overflow int64
  a.q.shape[1] = k2p62;
  expect_error(mla_decode(a), Errc::invalid_shape, {"q", "overflows 64-bit"});
  a = d.args();
  a.out.strides[0] = k2p62;  // offsets (B - 1) * 2^62 * 4 bytes overflow
  expect_error(mla_decode(a), Errc::invalid_shape, {"out", "4611686018427387904", "overflows"});
  a = d.args();
  a.q.strides[0] = -k2p62;  // negative offsets past the start of the address space
  expect_error(mla_decode(a), Errc::invalid_shape, {"q"});
}

TEST(BadInputs, CApiViewExtentOverflowIsAnError) {
  // The campaign's second crash: a raw mla_tensor whose element count
  // overflows int64 reached the reference's loops.
  std::vector<float> buf(64);
  mla_tensor logits{buf.data(), MLA_DTYPE_F32, MLA_DEVICE_CPU, 0, 2, {}, {}};
  logits.shape[0] = k2p62;
  logits.shape[1] = 64;
  logits.strides[0] = 64;
  logits.strides[1] = 1;
  mla_tensor idx = logits;
  idx.dtype = MLA_DTYPE_I32;
  EXPECT_EQ(mla_topk_indices(&logits, nullptr, 64, &idx, nullptr, 64, 1, -1, nullptr),
            MLA_ERR_INVALID_SHAPE);
  EXPECT_NE(std::string(mla_last_error_message()).find("logits"), std::string::npos)
      << mla_last_error_message();
  logits.shape[0] = 1;
  logits.strides[0] = INT64_MAX / 2;  // element offsets fit; bytes do not
  EXPECT_EQ(mla_topk_indices(&logits, nullptr, 64, &idx, nullptr, 64, 1, -1, nullptr),
            MLA_ERR_INVALID_SHAPE);
  logits.shape[0] = 2;
  EXPECT_EQ(mla_topk_indices(&logits, nullptr, 64, &idx, nullptr, 64, 1, -1, nullptr),
            MLA_ERR_INVALID_SHAPE);
  EXPECT_NE(std::string(mla_last_error_message()).find("logits"), std::string::npos);
}

// ---- sizes derived from a caller's numbers -------------------------------------------

DsaStepProblem dsa_problem(std::vector<int32_t> lengths, int64_t s_q = 1) {
  Rng rng(11);
  return testing::make_dsa_step_problem(rng,
                                        testing::dsa_step_shape(std::move(lengths), s_q, 16, 16));
}

// A DSA step (16 heads, pages of 16) with f32 outputs, run on the sparse path at top-64.
struct SparseDsaStep {
  DsaStepProblem p;
  HostTensor out, lse;
  DsaPolicy pol;
  explicit SparseDsaStep(std::vector<int32_t> lengths)
      : p(dsa_problem(std::move(lengths))),
        out(p.dense.make_out(DType::f32)),
        lse(p.dense.make_lse(DType::f32)) {
    pol.path = DsaPath::sparse;
    pol.topk = 64;
  }
  DsaDecodeArgs args(int64_t max_seqlen) const { return p.args(p.dense.q, out, lse, max_seqlen); }
};

TEST(BadInputs, DsaMaxSeqlen2Pow62IsAnErrorNotAHeapOverflow) {
  // The campaign's first crash: the logits workspace size wrapped, the step
  // then wrote past an 8.7 KB buffer.
  SparseDsaStep step({70, 100});
  const DsaPolicy& pol = step.pol;
  const DsaDecodeArgs a = step.args(k2p62);
  size_t bytes = 123;
  expect_error(dsa_decode_workspace_size(a, pol, &bytes), Errc::invalid_value,
               {"max_seqlen = 4611686018427387904", "overflows"});
  std::vector<uint8_t> ws(8704);
  expect_error(dsa_decode(a, pol, Workspace{ws.data(), ws.size()}), Errc::invalid_value,
               {"max_seqlen = 4611686018427387904"});
  expect_error(dsa_decode(step.args(INT64_MAX), pol, Workspace{ws.data(), ws.size()}),
               Errc::invalid_value, {"max_seqlen = 9223372036854775807"});
}

TEST(BadInputs, DsaOutputStrideInt64MinIsAnError) {
  // The step checks its outputs' overlap before the dense/sparse stage checks
  // their shapes: the extent check must come first there too.
  DsaStepProblem p = dsa_problem({70, 100});
  HostTensor out = p.dense.make_out(DType::f32), lse = p.dense.make_lse(DType::f32);
  DsaDecodeArgs a = p.args(p.dense.q, out, lse, 100);
  a.out.strides[0] = INT64_MIN;
  size_t bytes = 0;
  expect_error(dsa_decode_workspace_size(a, {}, &bytes), Errc::invalid_shape,
               {"out", "-9223372036854775808"});
}

TEST(BadInputs, LayerWeightShapesOverflow) {
  LayerConfig c = small_test_layer();
  c.heads = INT32_MAX;
  c.d_nope = INT32_MAX;
  LayerWeightShape s[kLayerWeightCount];
  expect_error(layer_weight_shapes(c, s), Errc::invalid_value, {"config", "2147483647"});
  c = small_test_layer();
  c.hidden = k2p62;  // wq_a [q_lora_rank, hidden] has 64 * 2^62 elements
  expect_error(layer_weight_shapes(c, s), Errc::invalid_value, {"weights.wq_a", "overflows"});
}

TEST(BadInputs, BlockSparseForcedBlockSumOverflow) {
  BlockSparseParams p;
  p.initial_blocks = INT32_MAX;
  p.local_blocks = 1;
  expect_error(validate_block_sparse_params(p), Errc::invalid_value,
               {"initial_blocks", "2147483647"});
}

TEST(BadInputs, TransferPageSizeAndPoolBytesOverflow) {
  const int32_t pages[2] = {0, 1};
  TransferRequest r;
  r.num_tokens = 4;
  for (TransferSide* s : {&r.src_latent, &r.dst_latent}) {
    s->pages = pages;
    s->num_pages = 2;
    s->page_size = 64;
  }
  TransferPlan plan;
  ASSERT_TRUE(plan_transfer(r, &plan).ok());
  r.src_latent.page_size = k2p62;  // page bytes page_size * 1152 overflow
  expect_error(plan_transfer(r, &plan), Errc::invalid_value,
               {"src_latent.page_size", "4611686018427387904"});
  r.src_latent.page_size = 64;
  r.dst_latent.num_pages = k2p62;  // num_pages * page_stride overflows
  expect_error(plan_transfer(r, &plan), Errc::invalid_value, {"dst_latent.num_pages"});
  r.dst_latent.num_pages = 2;
  r.first_token = INT64_MAX;
  expect_error(plan_transfer(r, &plan), Errc::invalid_value, {"first_token + num_tokens"});
}

TEST(BadInputs, CalibrationHqIsNotWrapped) {
  plan::Calibration cal;
  const std::string json =
      R"({"gpu": "h200", "entries": [{"kernel": "decode", "format": "bf16", "h_q": 4294967304,
          "fraction_of_ceiling": 0.5}]})";
  expect_error(plan::parse_calibration(json, &cal), Errc::invalid_value, {"h_q = 4294967304"});
}

TEST(BadInputs, MinWeightShardsNeverNegative) {
  plan::Workload w;
  w.mem_util = 1e-300;  // usable HBM ~0: the shard count leaves int's range
  plan::Plan p;
  const Status st = plan::make_plan(w, nullptr, &p);
  if (st.ok()) {
    EXPECT_GE(p.min_weight_shards, 1);
  } else {
    expect_error(st, Errc::invalid_value, {"mem_util = 1e-300"});
  }
}

TEST(BadInputs, TopkKIsCheckedBeforeAnything) {
  HostTensor logits(DType::f32, {2, 64}), idx(DType::i32, {2, 64});
  TopkArgs a;
  a.logits = logits.view();
  a.indices = idx.view();
  a.k = INT32_MAX;
  expect_error(topk_indices(a), Errc::invalid_value, {"k = 2147483647"});
}

TEST(BadInputs, EmptyViewWithAHugeDimInAProduct) {
  // Fuzz finding: an empty block table [INT64_MAX, 0] times rows_per_request
  // overflowed in the row-count check (an empty view bounds none of its dims).
  HostTensor logits(DType::f32, {2, 64}), idx(DType::i32, {2, 64});
  TopkArgs a;
  a.logits = logits.view();
  a.indices = idx.view();
  a.k = 64;
  a.block_table = TensorView::make(nullptr, DType::i32, {INT64_MAX, 0});
  a.rows_per_request = 576;
  expect_error(topk_indices(a), Errc::invalid_shape,
               {"block_table", "9223372036854775807 requests * rows_per_request 576"});
}

// ---- outputs that overlap --------------------------------------------------------------

TEST(BadInputs, DecodeStrideZeroOutIsRejected) {
  Decode d;
  DecodeArgs a = d.args();
  a.out.strides[2] = 0;  // every head writes the same 512 values
  expect_error(mla_decode(a), Errc::invalid_stride, {"out", "stride 0 in dim 2"});
}

TEST(BadInputs, DecodeOutAliasingTheCacheIsRejected) {
  Decode d;
  DecodeArgs a = d.args();
  a.out.data = a.kv.data.data;
  a.out.dtype = DType::bf16;
  expect_error(mla_decode(a), Errc::invalid_value, {"out", "overlaps input kv"});
}

TEST(BadInputs, LseAliasingOutIsRejected) {
  Decode d;
  DecodeArgs a = d.args();
  a.lse.data = static_cast<float*>(a.out.data) + 100;
  expect_error(mla_decode(a), Errc::invalid_value, {"out", "overlaps output lse"});
}

TEST(BadInputs, OverlapRejectedInEveryOp) {
  // topk: indices over logits.
  Rng rng(3);
  HostTensor logits = testing::random_tensor(rng, DType::f32, {2, 128});
  TopkArgs t;
  t.logits = logits.view();
  t.indices = logits.view();
  t.indices.dtype = DType::i32;
  t.indices.shape[1] = 64;
  t.k = 64;
  expect_error(topk_indices(t), Errc::invalid_value, {"indices", "overlaps input logits"});
  // rope: out partly over x (exact aliasing is the documented in-place use).
  HostTensor x = testing::random_tensor(rng, DType::f32, {4, 2, 64});
  HostTensor pos(DType::i64, {4});
  ApplyRopeArgs r;
  r.x = x.view();
  r.positions = pos.view();
  r.out = x.view();
  EXPECT_TRUE(apply_rope(r).ok());  // in place
  r.out.data = static_cast<float*>(r.x.data) + 64;
  r.out.shape[0] = 3;
  r.x.shape[0] = 3;
  r.positions.shape[0] = 3;
  expect_error(apply_rope(r), Errc::invalid_value, {"out", "overlaps input x"});
  // read_kv: c_kv over the cache.
  Decode d;
  HostTensor slots(DType::i64, {1}), k_rope(DType::f32, {1, kDr});
  ReadKvArgs rk;
  rk.cache = d.p.cache.view();
  rk.slots = slots.view();
  rk.c_kv = d.p.cache.view().data;
  rk.c_kv.ndim = 2;
  rk.c_kv.dtype = DType::f32;
  rk.c_kv.shape[0] = 1;
  rk.c_kv.shape[1] = kDc;
  rk.c_kv.strides[0] = kDc;
  rk.c_kv.strides[1] = 1;
  rk.k_rope = k_rope.view();
  expect_error(read_kv(rk), Errc::invalid_value, {"c_kv", "overlaps input cache"});
}

TEST(BadInputs, DsaWorkspaceOverlappingOutIsRejected) {
  SparseDsaStep step({70, 100});
  const DsaPolicy& pol = step.pol;
  const DsaDecodeArgs a = step.args(100);
  size_t bytes = 0;
  ASSERT_TRUE(dsa_decode_workspace_size(a, pol, &bytes).ok());
  std::vector<uint8_t> ws(bytes);
  EXPECT_TRUE(dsa_decode(a, pol, Workspace{ws.data(), ws.size()}).ok());
  expect_error(dsa_decode(a, pol, Workspace{a.out.data, bytes}), Errc::invalid_value,
               {"workspace", "overlaps out"});
}

// ---- empty batches and rows ------------------------------------------------------------

// An empty view as NumPy 2 gives it: zero strides everywhere.
TensorView zero_strides(TensorView t) {
  for (int d = 0; d < t.ndim; ++d) t.strides[d] = 0;
  return t;
}

TEST(BadInputs, DecodeEmptyBatchAndEmptyStepAreNoOps) {
  for (int64_t s_q : {int64_t(1), int64_t(0)}) {
    Decode d(s_q == 0 ? std::vector<int32_t>{5, 40} : std::vector<int32_t>{}, s_q);
    for (bool zero : {false, true}) {
      DecodeArgs a = d.args();
      if (zero) {
        a.q = zero_strides(a.q);
        a.out = zero_strides(a.out);
        a.lse = zero_strides(a.lse);
        if (s_q == 1) {
          a.block_table = zero_strides(a.block_table);
          a.cache_seqlens = zero_strides(a.cache_seqlens);
        }
      }
      size_t bytes = 1;
      Status st = decode_workspace_size(a, {}, &bytes);
      EXPECT_TRUE(st.ok()) << st.to_string();
      EXPECT_EQ(bytes, 0u);
      st = mla_decode(a);
      EXPECT_TRUE(st.ok()) << "s_q " << s_q << " zero strides " << zero << ": " << st.to_string();
    }
  }
}

TEST(BadInputs, DsaEmptyBatchIsANoOp) {
  SparseDsaStep step({});
  const DsaPolicy& pol = step.pol;
  DsaDecodeArgs a = step.args(1 << 20);
  size_t bytes = 1;
  ASSERT_TRUE(dsa_decode_workspace_size(a, pol, &bytes).ok());
  EXPECT_EQ(bytes, 0u);
  Status st = dsa_decode(a, pol);
  EXPECT_TRUE(st.ok()) << st.to_string();
}

TEST(BadInputs, TopkZeroRowsAndZeroColumns) {
  HostTensor l0(DType::f32, {0, 128}), i0(DType::i32, {0, 64});
  TopkArgs a;
  a.logits = zero_strides(l0.view());
  a.indices = zero_strides(i0.view());
  a.k = 64;
  Status st = topk_indices(a);
  EXPECT_TRUE(st.ok()) << st.to_string();
  // N = 0: no candidates, every entry -1.
  HostTensor l1(DType::f32, {3, 0}), i1(DType::i32, {3, 64});
  i1.poison();
  a.logits = zero_strides(l1.view());
  a.indices = i1.view();
  st = topk_indices(a);
  ASSERT_TRUE(st.ok()) << st.to_string();
  for (int64_t i = 0; i < i1.numel(); ++i) ASSERT_EQ(i1.get(i), -1.0) << i;
}

TEST(BadInputs, EmptyTokensInCacheAndIndexerOps) {
  Decode d;
  HostTensor slots(DType::i64, {0}), c_kv(DType::f32, {0, kDc}), k_rope(DType::f32, {0, kDr});
  Status st = append_kv({zero_strides(c_kv.view()), zero_strides(k_rope.view()),
                         zero_strides(slots.view()), d.p.cache.view()});
  EXPECT_TRUE(st.ok()) << st.to_string();
  ReadKvArgs rk;
  rk.cache = d.p.cache.view();
  rk.slots = zero_strides(slots.view());
  rk.c_kv = zero_strides(c_kv.view());
  rk.k_rope = zero_strides(k_rope.view());
  st = read_kv(rk);
  EXPECT_TRUE(st.ok()) << st.to_string();
  HostTensor q(DType::f32, {0, kIndexerHeads, kIndexerDim}), w(DType::f32, {0, kIndexerHeads});
  HostTensor q8(DType::e4m3, {0, kIndexerHeads, kIndexerDim}), wf(DType::f32, {0, kIndexerHeads});
  st = quantize_indexer_query({zero_strides(q.view()), zero_strides(w.view()),
                               zero_strides(q8.view()), zero_strides(wf.view())});
  EXPECT_TRUE(st.ok()) << st.to_string();
}

TEST(BadInputs, IndexerLogitsEmptyStepAndEmptyWidth) {
  DsaStepProblem p = dsa_problem({0, 0}, 1);
  for (int64_t s_q : {int64_t(0), int64_t(1)}) {
    HostTensor q8(DType::e4m3, {2, s_q, kIndexerHeads, kIndexerDim});
    HostTensor wf(DType::f32, {2, s_q, kIndexerHeads}), logits(DType::f32, {2, s_q, 0});
    IndexerLogitsDecodeArgs a;
    a.q8 = s_q == 0 ? zero_strides(q8.view()) : q8.view();
    a.w_folded = s_q == 0 ? zero_strides(wf.view()) : wf.view();
    a.cache = IndexerCacheView{p.index_cache.view()};
    a.block_table = p.index_block_table.view();
    a.cache_seqlens = p.dense.cache.seqlens_view(Device::cpu());
    a.logits = zero_strides(logits.view());
    Status st = indexer_logits_decode(a);
    EXPECT_TRUE(st.ok()) << "s_q " << s_q << ": " << st.to_string();
  }
}

TEST(BadInputs, SparseAndPrefillEmpty) {
  Decode d({}, 1);
  HostTensor idx(DType::i32, {0, 1, 64});
  SparseDecodeArgs s;
  s.q = zero_strides(d.p.q.view());
  s.kv = d.p.cache.view();
  s.indices = zero_strides(idx.view());
  s.softmax_scale = 0.1f;
  s.out = zero_strides(d.out.view());
  s.lse = zero_strides(d.lse.view());
  Status st = sparse_decode(s);
  EXPECT_TRUE(st.ok()) << st.to_string();

  HostTensor q(DType::f32, {0, 2, 8}), k(DType::f32, {0, 2, 8}), v(DType::f32, {0, 2, 8});
  HostTensor cu(DType::i32, {1}), out(DType::f32, {0, 2, 8}), lse(DType::f32, {2, 0});
  MhaPrefillArgs m;
  m.q = zero_strides(q.view());
  m.k = zero_strides(k.view());
  m.v = zero_strides(v.view());
  m.cu_seqlens_q = cu.view();
  m.cu_seqlens_k = cu.view();
  m.out = zero_strides(out.view());
  m.lse = zero_strides(lse.view());
  m.softmax_scale = 0.3f;
  st = mha_prefill(m);
  EXPECT_TRUE(st.ok()) << st.to_string();
}

// ---- the checked mode ------------------------------------------------------------------------

TEST(BadInputs, CheckedModeKeepsTheCpuPath) {
  // CPU tensors are always checked; the flag changes nothing there, and the C
  // ABI's per-thread switch reads back.
  Decode d;
  DecodeArgs a = d.args();
  const_cast<int32_t*>(a.block_table.ptr<int32_t>())[0] = 1000;
  ExecContext ctx;
  ctx.check_device_values = true;
  expect_error(mla_decode(a, {}, {}, ctx), Errc::out_of_range, {"block_table[0][0] = 1000"});
  EXPECT_EQ(mla_check_device_values(), 0);
  mla_set_check_device_values(1);
  EXPECT_EQ(mla_check_device_values(), 1);
  mla_set_check_device_values(0);
}

// ---- names ----------------------------------------------------------------------------------

TEST(BadInputs, DsaNamesIndexBlockTable) {
  SparseDsaStep step({70, 100});
  const DsaPolicy& pol = step.pol;
  // A page id past the indexer cache, in the indexer's own table.
  step.p.index_block_table.set(1, 1000);
  DsaDecodeArgs a = step.args(100);
  size_t bytes = 0;
  ASSERT_TRUE(dsa_decode_workspace_size(a, pol, &bytes).ok());
  std::vector<uint8_t> ws(bytes);
  expect_error(dsa_decode(a, pol, Workspace{ws.data(), ws.size()}), Errc::out_of_range,
               {"index_block_table[0][1] = 1000", "index_cache"});
  // A layout only the indexer stage checked before.
  a = step.args(100);
  a.index_block_table.strides[1] = 2;  // rows of 3 columns: (0, 2) and (1, 0) stay inside
  a.index_block_table.shape[1] = 2;
  expect_error(dsa_decode(a, pol, Workspace{ws.data(), ws.size()}), Errc::invalid_stride,
               {"index_block_table"});
}

TEST(BadInputs, LayerNamesConfigRopeFactor) {
  LayerConfig c = small_test_layer();
  c.rope.factor = -1;
  LayerWeightShape s[kLayerWeightCount];
  expect_error(layer_weight_shapes(c, s), Errc::invalid_value, {"config.rope.factor = -1"});
  ApplyRopeArgs r;
  r.config.factor = -1;
  expect_error(apply_rope(r), Errc::invalid_value, {"config.factor = -1"});
}

// ---- non-finite values ---------------------------------------------------------------------

TEST(BadInputs, Fp8CacheInfSaturatesOnlyItself) {
  std::vector<float> c(kDc), r(kDr, 0.25f);
  for (int i = 0; i < kDc; ++i) c[i] = 0.01f * float((i % 17) - 8);
  c[5] = INFINITY;
  c[6] = -INFINITY;
  c[130] = NAN;
  uint8_t e[Fp8DsMlaLayout::kEntryBytes];
  reference::quantize_fp8_ds_mla_entry(c.data(), r.data(), e);
  double back[kDqk];
  reference::dequantize_fp8_ds_mla_entry(e, back);
  float s0;
  std::memcpy(&s0, e + Fp8DsMlaLayout::kScaleOffset, 4);
  // The group's scale comes from its finite values (amax 0.08), not from inf.
  EXPECT_EQ(s0, reference::fp8_ds_mla_scale(0.08f));
  EXPECT_EQ(back[5], 448.0 * s0);
  EXPECT_EQ(back[6], -448.0 * s0);
  EXPECT_TRUE(std::isnan(back[130]));
  for (int i = 0; i < kDc; ++i) {
    if (i == 5 || i == 6 || i == 130) continue;
    ASSERT_NEAR(back[i], c[i], 0.08 / 16) << i;  // e4m3: 3 mantissa bits
  }
}

TEST(BadInputs, IndexerNaNKeyIsNeverSelected) {
  // One request, 64 keys; key 3 holds a NaN and would otherwise score highest.
  constexpr int64_t L = 64;
  HostTensor keys(DType::f32, {L, kIndexerDim}), slots(DType::i64, {L});
  for (int64_t t = 0; t < L; ++t) {
    slots.set(t, double(t));
    for (int d = 0; d < kIndexerDim; ++d) keys.set(t * kIndexerDim + d, t == 3 ? 1.0 : 0.01 * t);
  }
  keys.set(3 * kIndexerDim + 7, kNaN);
  HostTensor cache(DType::u8, {1, IndexerCacheLayout::kPageBytes});
  ASSERT_TRUE(
      append_indexer_keys({keys.view(), slots.view(), IndexerCacheView{cache.view()}}).ok());
  EXPECT_TRUE(std::isnan(reference::indexer_key_scale(IndexerCacheView{cache.view()}, 3)));

  HostTensor q(DType::f32, {1, 1, kIndexerHeads, kIndexerDim}),
      w(DType::f32, {1, 1, kIndexerHeads});
  for (int64_t i = 0; i < q.numel(); ++i) q.set(i, 1.0);
  for (int64_t i = 0; i < w.numel(); ++i) w.set(i, 1.0);
  HostTensor q8(DType::e4m3, {1, 1, kIndexerHeads, kIndexerDim});
  HostTensor wf(DType::f32, {1, 1, kIndexerHeads});
  ASSERT_TRUE(quantize_indexer_query({q.view(), w.view(), q8.view(), wf.view()}).ok());
  HostTensor bt(DType::i32, {1, 1}), lens(DType::i32, {1}), logits(DType::f32, {1, 1, L});
  lens.set(0, double(L));
  IndexerLogitsDecodeArgs il{q8.view(), wf.view(),   IndexerCacheView{cache.view()},
                             bt.view(), lens.view(), logits.view()};
  ASSERT_TRUE(indexer_logits_decode(il).ok());
  EXPECT_TRUE(std::isnan(logits.get(3)));
  HostTensor idx(DType::i32, {1, 64});
  TopkArgs t;
  t.logits = logits.view();
  t.logits.ndim = 2;
  t.logits.shape[0] = 1;
  t.logits.shape[1] = L;
  t.logits.strides[0] = L;
  t.logits.strides[1] = 1;
  t.k = 64;
  t.indices = idx.view();
  ASSERT_TRUE(topk_indices(t).ok());
  for (int64_t j = 0; j < 64; ++j) EXPECT_NE(idx.get(j), 3.0) << j;
  EXPECT_EQ(idx.get(63), -1.0);  // 63 candidates only
}

TEST(BadInputs, DecodeNaNQueryPoisonsOnlyItsRow) {
  Decode d({20, 30}, 1);
  d.p.q.set(7, kNaN);  // request 0, head 0
  ASSERT_TRUE(mla_decode(d.args()).ok());
  const int64_t H = 16;
  EXPECT_TRUE(std::isnan(d.out.get(0)));
  EXPECT_TRUE(std::isnan(d.lse.get(0)));
  for (int64_t h = 1; h < H; ++h) ASSERT_TRUE(std::isfinite(d.lse.get(h))) << h;
  for (int64_t i = H * kDv; i < d.out.numel(); ++i) ASSERT_TRUE(std::isfinite(d.out.get(i))) << i;
}

TEST(BadInputs, TopkInfIsACandidateNaNAndMinusInfAreNot) {
  HostTensor logits(DType::f32, {1, 128}), idx(DType::i32, {1, 64});
  for (int64_t i = 0; i < 128; ++i) logits.set(i, -kInf);
  logits.set(10, kInf);
  logits.set(11, kNaN);
  logits.set(12, 1.0);
  TopkArgs t;
  t.logits = logits.view();
  t.indices = idx.view();
  t.k = 64;
  ASSERT_TRUE(topk_indices(t).ok());
  EXPECT_EQ(idx.get(0), 10.0);
  EXPECT_EQ(idx.get(1), 12.0);
  EXPECT_EQ(idx.get(2), -1.0);
}

}  // namespace
}  // namespace mla
