// Token top-k: a hand example of the order rules (ties, -inf, NaN, padding),
// random rows with many ties against an independent full sort, translation to
// global cache slots, and the validation errors.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/expect_status.hpp"
#include "common/param_name.hpp"
#include "common/random.hpp"
#include "mla/topk.hpp"

namespace mla {
namespace {

using testing::expect_error;

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(Topk, HandExampleOfTheOrderRules) {
  // Positions:            0    1    2     3     4    5    6 (past the length)
  std::vector<float> s = {1.f, 3.f, 3.f, -kInf, NAN, 2.f, 9.f};
  int32_t len = 6;
  std::vector<int32_t> out(64, 12345);
  TopkArgs a;
  a.logits = TensorView::make(s.data(), DType::f32, {1, 7});
  a.lengths = TensorView::make(&len, DType::i32, {1});
  a.k = 64;
  a.indices = TensorView::make(out.data(), DType::i32, {1, 64});
  ASSERT_TRUE(topk_indices(a).ok());
  // 3 (pos 1, then the tie at pos 2), 2, 1; -inf and NaN never; pos 6 is past the length.
  const std::vector<int32_t> want_head = {1, 2, 5, 0};
  for (int j = 0; j < 64; ++j) EXPECT_EQ(out[j], j < 4 ? want_head[j] : -1) << j;
}

TEST(Topk, ByPositionOrderIsTheSameSetAscending) {
  // Positions:            0    1    2     3     4    5    6    7
  std::vector<float> s = {1.f, 3.f, 3.f, -kInf, NAN, 2.f, 9.f, 3.f};
  std::vector<int32_t> out(64, 12345);
  TopkArgs a;
  a.logits = TensorView::make(s.data(), DType::f32, {1, 8});
  a.k = 64;
  a.indices = TensorView::make(out.data(), DType::i32, {1, 64});
  a.order = TopkOrder::by_position;
  ASSERT_TRUE(topk_indices(a).ok());
  const std::vector<int32_t> want_head = {0, 1, 2, 5, 6, 7};
  for (int j = 0; j < 64; ++j) EXPECT_EQ(out[j], j < 6 ? want_head[j] : -1) << j;
  // k 64 of 100 distinct scores: the 64 best, ascending.
  std::vector<float> t(100);
  for (int p = 0; p < 100; ++p) t[p] = float((p * 37) % 100);
  a.logits = TensorView::make(t.data(), DType::f32, {1, 100});
  ASSERT_TRUE(topk_indices(a).ok());
  std::vector<int32_t> want;
  for (int p = 0; p < 100; ++p)
    if ((p * 37) % 100 >= 36) want.push_back(p);
  ASSERT_EQ(want.size(), 64u);
  for (int j = 0; j < 64; ++j) EXPECT_EQ(out[j], want[j]) << j;
  a.order = static_cast<TopkOrder>(5);
  expect_error(topk_indices(a), Errc::invalid_value, "order = 5");
}

// Independent oracle: stable sort of all candidates by descending score.
std::vector<int32_t> naive_topk(const float* s, int64_t len, int k) {
  std::vector<int32_t> c;
  for (int32_t p = 0; p < len; ++p)
    if (!std::isnan(s[p]) && s[p] > -kInf) c.push_back(p);
  std::stable_sort(c.begin(), c.end(), [&](int32_t a, int32_t b) { return s[a] > s[b]; });
  c.resize(std::min<size_t>(c.size(), k));
  c.resize(k, -1);
  return c;
}

struct TopkCase {
  int64_t R, N;
  int k;
};
void PrintTo(const TopkCase& c, std::ostream* os) {
  *os << "R" << c.R << " N" << c.N << " k" << c.k;
}
class TopkRandom : public ::testing::TestWithParam<TopkCase> {};

TEST_P(TopkRandom, MatchesStableSort) {
  const auto p = GetParam();
  testing::Rng rng(p.R * 131 + p.N + p.k);
  std::vector<float> s(p.R * p.N);
  // Few distinct values (many ties), some -inf (masked), a few NaN.
  for (auto& x : s) {
    const int64_t u = rng.randint(0, 99);
    x = u < 10 ? -kInf : u < 12 ? NAN : float(rng.randint(-20, 20)) * 0.25f;
  }
  std::vector<int32_t> lens(p.R);
  for (int64_t r = 0; r < p.R; ++r) {
    const int64_t pick = rng.randint(0, 4);
    lens[r] = int32_t(pick == 0   ? 0
                      : pick == 1 ? p.N
                      : pick == 2 ? std::min<int64_t>(p.k / 2, p.N)
                                  : rng.randint(0, p.N));
  }
  std::vector<int32_t> out(p.R * p.k, 777);
  TopkArgs a;
  a.logits = TensorView::make(s.data(), DType::f32, {p.R, p.N});
  a.lengths = TensorView::make(lens.data(), DType::i32, {p.R});
  a.k = p.k;
  a.indices = TensorView::make(out.data(), DType::i32, {p.R, p.k});
  ASSERT_TRUE(topk_indices(a).ok());
  for (int64_t r = 0; r < p.R; ++r) {
    const auto want = naive_topk(s.data() + r * p.N, lens[r], p.k);  // N = 0: s is empty
    for (int j = 0; j < p.k; ++j) ASSERT_EQ(out[r * p.k + j], want[j]) << "row " << r << " j " << j;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, TopkRandom,
                         ::testing::Values(TopkCase{8, 100, 64}, TopkCase{5, 300, 128},
                                           TopkCase{3, 3000, 2048}, TopkCase{2, 9000, 8192},
                                           TopkCase{4, 1, 64}, TopkCase{3, 0, 64}),
                         ::mla::testing::PrintedName{});

TEST(Topk, TranslatesToGlobalSlots) {
  // 2 requests x 2 rows, page size 16, shuffled pages.
  const int64_t B = 2, rows = 2, R = B * rows, N = 40, page = 16, max_pages = 3;
  testing::Rng rng(9);
  auto s = testing::random_f32(rng, R * N);
  std::vector<int32_t> lens{40, 39, 17, 16};
  std::vector<int32_t> bt{7, 2, 5, 0, 3, -1};  // request 1 uses pages 0, 3 (17 tokens)
  std::vector<int32_t> out(R * 64), pos(R * 64);
  TopkArgs a;
  a.logits = TensorView::make(s.data(), DType::f32, {R, N});
  a.lengths = TensorView::make(lens.data(), DType::i32, {R});
  a.k = 64;
  a.indices = TensorView::make(pos.data(), DType::i32, {R, 64});
  ASSERT_TRUE(topk_indices(a).ok());
  a.indices = TensorView::make(out.data(), DType::i32, {R, 64});
  a.block_table = TensorView::make(bt.data(), DType::i32, {B, max_pages});
  a.page_size = int32_t(page);
  a.rows_per_request = int32_t(rows);
  a.num_pages = 8;
  ASSERT_TRUE(topk_indices(a).ok()) << topk_indices(a).to_string();
  for (int64_t r = 0; r < R; ++r)
    for (int j = 0; j < 64; ++j) {
      const int32_t p = pos[r * 64 + j];
      const int32_t want = p < 0 ? -1 : bt[(r / rows) * max_pages + p / page] * page + p % page;
      ASSERT_EQ(out[r * 64 + j], want) << r << " " << j;
    }
  // A page past the pool, a row longer than its block table row.
  bt[3] = 8;
  expect_error(topk_indices(a), Errc::out_of_range, "block_table[1][0] = 8 is past num_pages = 8");
  bt[3] = 0;
  lens[2] = 40;  // request 1 row 0: 3 pages, its third is -1
  expect_error(topk_indices(a), Errc::out_of_range, "block_table[1][2] = -1 is negative");
  lens[2] = 17;
  a.rows_per_request = 3;
  expect_error(topk_indices(a), Errc::invalid_shape, "logits has R = 4");
}

TEST(TopkValidation, Errors) {
  std::vector<float> s(2 * 10, 1.f);
  std::vector<int32_t> lens{10, 3}, out(2 * 128);
  TopkArgs a;
  a.logits = TensorView::make(s.data(), DType::f32, {2, 10});
  a.lengths = TensorView::make(lens.data(), DType::i32, {2});
  a.k = 64;
  a.indices = TensorView::make(out.data(), DType::i32, {2, 64});
  ASSERT_TRUE(topk_indices(a).ok());
  for (int k : {0, 100, 8256, -64}) {
    a.k = k;
    expect_error(topk_indices(a), Errc::invalid_value, fmt::format("k = {} is not allowed", k));
  }
  a.k = 128;
  expect_error(topk_indices(a), Errc::invalid_shape, "indices");  // [2, 64] for k = 128
  a.k = 64;
  lens[1] = -2;
  expect_error(topk_indices(a), Errc::out_of_range, "lengths[1] = -2 is negative");
  lens[1] = 11;
  expect_error(topk_indices(a), Errc::out_of_range, "lengths[1] = 11 is past N = 10");
  lens[1] = 3;
  a.logits.dtype = DType::bf16;
  expect_error(topk_indices(a), Errc::invalid_dtype, "logits: dtype bf16");
  a.logits.dtype = DType::f32;
  a.indices.dtype = DType::i64;
  expect_error(topk_indices(a), Errc::invalid_dtype, "indices: dtype i64");
  a.indices.dtype = DType::i32;
  a.lengths.device = Device::cuda();
  expect_error(topk_indices(a), Errc::invalid_device, "lengths");
}

}  // namespace
}  // namespace mla
