// The public prefill select (mla/indexer_select.hpp) on CPU tensors: equal, bit
// for bit, to indexer_logits_prefill followed by topk_indices (both orders,
// rows shorter than k, empty rows, ranges at the ends of the keys, T = 0,
// N = 0), the same through the C ABI, the workspace sizes, and every
// validation message naming the argument and its value.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "common/expect_status.hpp"
#include "common/random.hpp"
#include "mla/c_api.h"
#include "mla/indexer_select.hpp"

namespace mla {
namespace {

using testing::expect_error;
using testing::Rng;

// Random prefill inputs: e4m3 codes without NaN, folded weights of both signs,
// power-of-two key scales, and the caller's key ranges.
struct SelectInputs {
  int64_t T, N;
  std::vector<uint8_t> q8, k8;
  std::vector<float> wf, ks;
  std::vector<int32_t> k_start, k_end;
  SelectInputs(int64_t t, int64_t n, std::vector<int32_t> lo, std::vector<int32_t> hi,
               uint64_t seed = 5)
      : T(t),
        N(n),
        q8(t * 64 * 128 + 1),
        k8(n * 128 + 1),
        ks(n + 1),
        k_start(std::move(lo)),
        k_end(std::move(hi)) {
    Rng rng(seed);
    for (auto* v : {&q8, &k8})
      for (auto& c : *v) do
          c = uint8_t(rng.randint(0, 255));
        while ((c & 0x7f) == 0x7f);
    wf = testing::random_f32(rng, t * 64 + 1);
    for (auto& s : ks) s = float(1 << rng.randint(0, 4)) / 8.f;
  }
  IndexerLogitsPrefillArgs logits(float* out) {
    return {TensorView::make(q8.data(), DType::e4m3, {T, 64, 128}),
            TensorView::make(wf.data(), DType::f32, {T, 64}),
            TensorView::make(k8.data(), DType::e4m3, {N, 128}),
            TensorView::make(ks.data(), DType::f32, {N}),
            TensorView::make(k_start.data(), DType::i32, {T}),
            TensorView::make(k_end.data(), DType::i32, {T}),
            TensorView::make(out, DType::f32, {T, N})};
  }
  IndexerSelectPrefillArgs select(int32_t* out, int32_t k, TopkOrder order) {
    const IndexerLogitsPrefillArgs l = logits(nullptr);
    return {l.q8,      l.w_folded, l.k8,
            l.k_scale, l.k_start,  l.k_end,
            k,         order,      TensorView::make(out, DType::i32, {T, k})};
  }
  // indexer_logits_prefill then topk_indices, one by one.
  std::vector<int32_t> two_calls(int32_t k, TopkOrder order) {
    std::vector<float> lg(std::max<int64_t>(T * N, 1));
    std::vector<int32_t> idx(std::max<int64_t>(T * k, 1));
    EXPECT_TRUE(indexer_logits_prefill(logits(lg.data())).ok());
    TopkArgs t;
    t.logits = TensorView::make(lg.data(), DType::f32, {T, N});
    t.k = k;
    t.order = order;
    t.indices = TensorView::make(idx.data(), DType::i32, {T, k});
    EXPECT_TRUE(topk_indices(t).ok());
    idx.resize(T * k);
    return idx;
  }
  std::vector<int32_t> select_call(int32_t k, TopkOrder order, IndexerSelectOptions o = {}) {
    std::vector<int32_t> idx(std::max<int64_t>(T * k, 1), 0x5a5a5a5a);  // poisoned
    const Status st = indexer_select_prefill(select(idx.data(), k, order), o);
    EXPECT_TRUE(st.ok()) << st.message();
    idx.resize(T * k);
    return idx;
  }
};

struct Case {
  const char* name;
  int64_t T, N;
  int32_t k;
  std::vector<int32_t> lo, hi;
};

class IndexerSelect : public ::testing::TestWithParam<TopkOrder> {};

TEST_P(IndexerSelect, EqualsLogitsThenTopkBitForBit) {
  const TopkOrder order = GetParam();
  const std::vector<Case> cases = {
      // full rows, a row shorter than k, an empty row, the last key alone, a
      // window ending at N, a window from 0
      {"edges", 6, 300, 64, {0, 10, 7, 299, 200, 0}, {300, 40, 7, 300, 300, 65}},
      {"k128", 3, 257, 128, {0, 1, 128}, {257, 256, 257}},
      {"short rows", 2, 50, 64, {0, 25}, {50, 50}},
      {"no keys", 3, 0, 64, {0, 0, 0}, {0, 0, 0}},
      {"no tokens", 0, 40, 64, {}, {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    SelectInputs in(c.T, c.N, c.lo, c.hi);
    const std::vector<int32_t> want = in.two_calls(c.k, order);
    EXPECT_EQ(in.select_call(c.k, order), want);
    for (auto path :
         {IndexerSelectPath::automatic, IndexerSelectPath::unfused, IndexerSelectPath::fused})
      EXPECT_EQ(in.select_call(c.k, order, {path, 64}), want);  // CPU: one reference
    if (c.T > 0 && c.N > 0) {                                   // rows past their candidates are -1
      const int64_t len = c.hi[0] - c.lo[0];
      if (len < c.k) EXPECT_EQ(want[len], -1);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Orders, IndexerSelect,
                         ::testing::Values(TopkOrder::best_first, TopkOrder::by_position),
                         [](const auto& info) {
                           return info.param == TopkOrder::best_first ? "best_first"
                                                                      : "by_position";
                         });

TEST(IndexerSelectCApi, EqualsTheCppEntry) {
  SelectInputs in(4, 130, {0, 3, 64, 129}, {130, 100, 64, 130});
  const std::vector<int32_t> want = in.two_calls(64, TopkOrder::by_position);
  std::vector<int32_t> got(4 * 64, -7);
  auto c = [](const TensorView& v) {
    mla_tensor t{v.data, int32_t(v.dtype), MLA_DEVICE_CPU, 0, v.ndim, {}, {}};
    for (int d = 0; d < v.ndim; ++d) t.shape[d] = v.shape[d], t.strides[d] = v.strides[d];
    return t;
  };
  const IndexerSelectPrefillArgs a = in.select(got.data(), 64, TopkOrder::by_position);
  const mla_tensor q8 = c(a.q8), wf = c(a.w_folded), k8 = c(a.k8), ks = c(a.k_scale),
                   k0 = c(a.k_start), k1 = c(a.k_end), idx = c(a.indices);
  size_t bytes = 1;
  ASSERT_EQ(mla_indexer_select_prefill_workspace_size(&q8, &wf, &k8, &ks, &k0, &k1, 64,
                                                      MLA_TOPK_BY_POSITION,
                                                      MLA_INDEXER_SELECT_FUSED, 0, &idx, &bytes),
            MLA_OK)
      << mla_last_error_message();
  EXPECT_EQ(bytes, 0u);  // CPU
  ASSERT_EQ(mla_indexer_select_prefill(&q8, &wf, &k8, &ks, &k0, &k1, 64, MLA_TOPK_BY_POSITION,
                                       MLA_INDEXER_SELECT_AUTOMATIC, 0, &idx, nullptr, 0, nullptr),
            MLA_OK)
      << mla_last_error_message();
  EXPECT_EQ(got, want);
  EXPECT_EQ(mla_indexer_select_prefill(&q8, &wf, &k8, &ks, &k0, &k1, 64, MLA_TOPK_BY_POSITION, 3, 0,
                                       &idx, nullptr, 0, nullptr),
            MLA_ERR_INVALID_VALUE);
  EXPECT_NE(std::string(mla_last_error_message()).find("opts.path = 3"), std::string::npos)
      << mla_last_error_message();
}

TEST(IndexerSelectValidation, EveryMessageNamesTheArgumentAndValue) {
  SelectInputs in(3, 100, {0, 10, 20}, {100, 90, 80});
  std::vector<int32_t> out(3 * 128);
  const IndexerSelectPrefillArgs good = in.select(out.data(), 64, TopkOrder::best_first);
  ASSERT_TRUE(indexer_select_prefill(good).ok());
  auto bad = [&](auto edit, Errc code, std::vector<std::string> frags,
                 IndexerSelectOptions o = {}) {
    IndexerSelectPrefillArgs a = good;
    edit(a);
    expect_error(indexer_select_prefill(a, o), code, frags);
    size_t bytes = 0;  // the size query checks the same arguments (not device values)
    if (code != Errc::out_of_range)
      expect_error(indexer_select_prefill_workspace_size(a, o, &bytes), code, frags);
  };
  // The indexer's inputs (indexer_logits_prefill's checks).
  bad([](auto& a) { a.q8.dtype = DType::u8; }, Errc::invalid_dtype, {"q8: dtype u8"});
  bad([](auto& a) { a.q8.shape[1] = 32; }, Errc::invalid_shape, {"q8: shape [3, 32, 128]"});
  bad([](auto& a) { a.w_folded.shape[0] = 2; }, Errc::invalid_shape, {"w_folded: shape [2, 64]"});
  bad([](auto& a) { a.w_folded.dtype = DType::bf16; }, Errc::invalid_dtype,
      {"w_folded: dtype bf16"});
  bad([](auto& a) { a.k8.shape[1] = 64; }, Errc::invalid_shape, {"k8: shape [100, 64]"});
  bad([](auto& a) { a.k_scale.shape[0] = 99; }, Errc::invalid_shape, {"k_scale: shape [99]"});
  bad([](auto& a) { a.k_start.dtype = DType::i64; }, Errc::invalid_dtype, {"k_start: dtype i64"});
  bad([](auto& a) { a.k_end.shape[0] = 4; }, Errc::invalid_shape, {"k_end: shape [4]"});
  bad([](auto& a) { a.k8.strides[1] = 2; }, Errc::invalid_stride, {"k8"});
  bad([](auto& a) { a.k_scale.device = Device::cuda(0); }, Errc::invalid_device,
      {"k_scale is on cuda:0", "q8 is on cpu"});
  // Top-k's arguments (topk_indices' checks).
  bad([](auto& a) { a.k = 100; }, Errc::invalid_value, {"k = 100 is not allowed"});
  bad([](auto& a) { a.k = 0; }, Errc::invalid_value, {"k = 0 is not allowed"});
  bad([](auto& a) { a.k = 8256; }, Errc::invalid_value, {"k = 8256 is not allowed"});
  bad([](auto& a) { a.order = static_cast<TopkOrder>(7); }, Errc::invalid_value,
      {"order = 7 is not a TopkOrder"});
  bad([](auto& a) { a.indices.shape[1] = 128; }, Errc::invalid_shape,
      {"indices: shape [3, 128] does not match [T, k]", "expected 64"});
  bad([](auto& a) { a.indices.shape[0] = 2; }, Errc::invalid_shape,
      {"indices: shape [2, 64]", "expected 3"});
  bad([](auto& a) { a.indices.dtype = DType::i64; }, Errc::invalid_dtype, {"indices: dtype i64"});
  bad([](auto& a) { a.indices.device = Device::cuda(0); }, Errc::invalid_device,
      {"indices is on cuda:0", "q8 is on cpu"});
  bad([](auto& a) { a.indices.strides[1] = 2; }, Errc::invalid_stride, {"indices"});
  // The options.
  bad([](auto&) {}, Errc::invalid_value, {"opts.path = 9 is not an IndexerSelectPath"},
      {static_cast<IndexerSelectPath>(9), 0});
  bad([](auto&) {}, Errc::invalid_value, {"opts.capacity = -1 is not allowed"},
      {IndexerSelectPath::fused, -1});
  bad([](auto&) {}, Errc::invalid_value, {"opts.capacity = 2147483648 is not allowed"},
      {IndexerSelectPath::fused, int64_t(1) << 31});
  // Overlap of the output with an input.
  bad([&](auto& a) { a.indices.data = in.q8.data() + 1024; }, Errc::invalid_value,
      {"indices", "overlaps input q8"});  // (inside q8's buffer: q8's bytes only)
  // The key ranges' values (CPU tensors are always checked).
  auto ranges = [&](int64_t t, int32_t lo, int32_t hi, const char* frag) {
    const int32_t lo0 = in.k_start[t], hi0 = in.k_end[t];
    in.k_start[t] = lo, in.k_end[t] = hi;
    expect_error(indexer_select_prefill(good), Errc::out_of_range, frag);
    in.k_start[t] = lo0, in.k_end[t] = hi0;
  };
  ranges(1, 0, 101, "k_end[1] = 101 is past N = 100 keys");
  ranges(2, 50, 40, "k_end[2] = 40 is before k_start[2] = 50");
  ranges(0, -3, 10, "k_start[0] = -3 is negative");
  // The size query's output pointer.
  expect_error(indexer_select_prefill_workspace_size(good, {}, nullptr), Errc::invalid_value,
               "bytes: output pointer is null");
  size_t bytes = 1;
  ASSERT_TRUE(indexer_select_prefill_workspace_size(good, {}, &bytes).ok());
  EXPECT_EQ(bytes, 0u);  // CPU: the reference needs no scratch
}

// CUDA tensors are validated and sized on the host: the workspace sizes and
// the insufficient-workspace error need no GPU (the data is never read).
TEST(IndexerSelectValidation, CudaWorkspaceSizesAndTooSmallWorkspace) {
  SelectInputs in(3, 1000, {0, 0, 0}, {1000, 1000, 1000});
  std::vector<int32_t> out(3 * 64);
  IndexerSelectPrefillArgs a = in.select(out.data(), 64, TopkOrder::best_first);
  for (TensorView* t : {&a.q8, &a.w_folded, &a.k8, &a.k_scale, &a.k_start, &a.k_end, &a.indices})
    t->device = Device::cuda(0);
  size_t unfused = 0, automatic = 0, fused = 0;
  const Status st =
      indexer_select_prefill_workspace_size(a, {IndexerSelectPath::unfused}, &unfused);
  if (!mla_built_with_cuda()) {
    expect_error(st, Errc::unsupported, "indexer_select_prefill_workspace_size");
    return;
  }
  ASSERT_TRUE(st.ok()) << st.message();
  // The [T, N] logits, rounded to 256 bytes, plus 256 of slack for the base.
  EXPECT_EQ(unfused, (size_t(3 * 1000 * 4) + 255) / 256 * 256 + 256);
  ASSERT_TRUE(indexer_select_prefill_workspace_size(a, {}, &automatic).ok());
  EXPECT_EQ(automatic, unfused);  // automatic runs unfused
  ASSERT_TRUE(indexer_select_prefill_workspace_size(a, {IndexerSelectPath::fused}, &fused).ok());
  EXPECT_GT(fused, 3u * 64 * 8 * 8);  // at least the candidate buffers: 8 k entries of 8 B a row
  expect_error(indexer_select_prefill(a), Errc::insufficient_workspace,
               {"workspace: 0 bytes given (null)", "automatic path",
                "needs " + std::to_string(unfused) + " bytes"});
  std::vector<uint8_t> ws(64);
  expect_error(indexer_select_prefill(a, {IndexerSelectPath::fused}, {ws.data(), ws.size()}),
               Errc::insufficient_workspace,
               {"workspace: 64 bytes given", "fused path", "needs " + std::to_string(fused)});
}

}  // namespace
}  // namespace mla
