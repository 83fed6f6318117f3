// Sparse absorbed attention: lists naming every visible key equal dense decode
// (refattn's mla_decode); random lists with duplicates, -1 and topk_length
// against a naive softmax written here; empty lists; prefill; validation.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "common/expect_status.hpp"
#include "common/param_name.hpp"
#include "common/random.hpp"
#include "mla/decode.hpp"
#include "mla/dims.hpp"
#include "mla/sparse.hpp"
#include "reference/kv_cache_ref.hpp"

namespace mla {
namespace {

using testing::expect_error;

using testing::Rng;
constexpr double kInf = std::numeric_limits<double>::infinity();

// Sizes of a sparse decode call.
struct DecodeDims {
  int64_t B, s_q, h_q, topk;
};

// SparseDecodeArgs over dense host buffers: q [B, s_q, h_q, 576] of q_dt,
// indices [B, s_q, topk] and topk_length [B] (nullptr: not given) i32, out
// [B, s_q, h_q, 512] and lse [B, h_q, s_q] of out_dt.
SparseDecodeArgs host_decode_args(DecodeDims d, void* q, DType q_dt, const KvCacheView& kv,
                                  int32_t* indices, int32_t* topk_length, float scale, void* out,
                                  void* lse, DType out_dt) {
  SparseDecodeArgs a;
  a.q = TensorView::make(q, q_dt, {d.B, d.s_q, d.h_q, kDqk});
  a.kv = kv;
  a.indices = TensorView::make(indices, DType::i32, {d.B, d.s_q, d.topk});
  if (topk_length) a.topk_length = TensorView::make(topk_length, DType::i32, {d.B});
  a.softmax_scale = scale;
  a.out = TensorView::make(out, out_dt, {d.B, d.s_q, d.h_q, kDv});
  a.lse = TensorView::make(lse, out_dt, {d.B, d.h_q, d.s_q});
  return a;
}

// Naive attention of one query over explicit key rows (576 values each).
void naive_attend(const double* q, const std::vector<std::vector<double>>& keys, double scale,
                  double* out, double* lse) {
  std::fill(out, out + kDv, 0.0);
  if (keys.empty()) {
    *lse = -kInf;
    return;
  }
  std::vector<double> s;
  for (const auto& k : keys) {
    double d = 0;
    for (int c = 0; c < kDqk; ++c) d += q[c] * k[c];
    s.push_back(d * scale);
  }
  const double m = *std::max_element(s.begin(), s.end());
  double z = 0;
  for (double x : s) z += std::exp(x - m);
  for (size_t j = 0; j < keys.size(); ++j)
    for (int c = 0; c < kDv; ++c) out[c] += std::exp(s[j] - m) / z * keys[j][c];
  *lse = m + std::log(z);
}

std::vector<double> entry(const KvCacheView& kv, int64_t slot) {
  std::vector<double> e(kDqk);
  reference::load_kv_entry(kv, slot, e.data());
  return e;
}

struct SparseCase {
  KvFormat format;
  int64_t page_size;
  std::vector<int32_t> lens;
  int64_t s_q, h_q;
};
void PrintTo(const SparseCase& c, std::ostream* os) {
  *os << kv_format_name(c.format) << " page" << c.page_size << " L" << testing::join(c.lens)
      << " s_q" << c.s_q << " h" << c.h_q;
}
class SparseDecode : public ::testing::TestWithParam<SparseCase> {};

TEST_P(SparseDecode, FullListsEqualDenseDecode) {
  const auto p = GetParam();
  Rng rng(p.page_size * 17 + p.s_q * 3 + p.h_q);
  const auto cache = testing::make_paged_cache(
      rng, p.lens, {.format = p.format, .page_size = p.page_size, .page_pad = 40});
  const int64_t B = p.lens.size(), s_q = p.s_q, h_q = p.h_q;
  const double scale = deepseek_v32_softmax_scale();
  auto q = testing::random_f64(rng, B * s_q * h_q * kDqk);
  // topk: every visible key plus room for -1 entries scattered among them.
  int64_t max_len = 0;
  for (int32_t l : p.lens) max_len = std::max<int64_t>(max_len, l);
  const int64_t topk = max_len + 5;
  std::vector<int32_t> idx(B * s_q * topk, -1);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < s_q; ++i) {
      const int64_t vis = std::max<int64_t>(p.lens[b] - (s_q - 1 - i), 0);
      std::vector<int32_t> list(topk, -1);
      for (int64_t pos = 0; pos < vis; ++pos) list[pos] = int32_t(cache.slot(b, pos));
      rng.shuffle(list);  // order and the place of -1 do not matter
      std::copy(list.begin(), list.end(), idx.begin() + (b * s_q + i) * topk);
    }
  std::vector<double> out_s(B * s_q * h_q * kDv), lse_s(B * h_q * s_q);
  std::vector<double> out_d(out_s.size()), lse_d(lse_s.size());
  testing::poison(out_s);
  testing::poison(lse_s);
  const KvCacheView kv = cache.view();
  const SparseDecodeArgs sa =
      host_decode_args({B, s_q, h_q, topk}, q.data(), DType::f64, kv, idx.data(), nullptr,
                       float(scale), out_s.data(), lse_s.data(), DType::f64);
  const Status st = sparse_decode(sa);
  ASSERT_TRUE(st.ok()) << st.to_string();

  DecodeArgs da;
  da.q = sa.q;
  da.kv = kv;
  da.block_table = cache.block_table_view();
  da.cache_seqlens = cache.seqlens_view();
  da.softmax_scale = sa.softmax_scale;
  da.causal = true;
  da.out = TensorView::make(out_d.data(), DType::f64, {B, s_q, h_q, kDv});
  da.lse = TensorView::make(lse_d.data(), DType::f64, {B, h_q, s_q});
  const Status sd = mla_decode(da);
  ASSERT_TRUE(sd.ok()) << sd.to_string();
  // Both are fp64 sums of the same terms in another order: ~1e-15 relative.
  for (size_t k = 0; k < lse_s.size(); ++k) {
    if (std::isinf(lse_d[k]))
      ASSERT_EQ(lse_s[k], lse_d[k]) << k;
    else
      ASSERT_NEAR(lse_s[k], lse_d[k], 1e-11 * (1 + std::fabs(lse_d[k]))) << k;
  }
  for (size_t k = 0; k < out_s.size(); ++k) ASSERT_NEAR(out_s[k], out_d[k], 1e-11) << k;
}

// Random lists: duplicates, -1, entries past topk_length holding garbage.
TEST_P(SparseDecode, RandomListsMatchNaive) {
  const auto p = GetParam();
  Rng rng(p.page_size * 19 + p.s_q * 5 + p.h_q);
  const auto cache =
      testing::make_paged_cache(rng, p.lens, {.format = p.format, .page_size = p.page_size});
  const int64_t B = p.lens.size(), s_q = p.s_q, h_q = p.h_q, topk = 64;
  const double scale = 0.07;
  auto qb = testing::random_bf16(rng, B * s_q * h_q * kDqk, -2, 2);
  std::vector<int32_t> idx(B * s_q * topk), tl(B);
  for (int64_t b = 0; b < B; ++b) {
    tl[b] = int32_t(rng.randint(0, topk));
    for (int64_t i = 0; i < s_q; ++i)
      for (int64_t j = 0; j < topk; ++j) {
        int32_t& v = idx[(b * s_q + i) * topk + j];
        if (j >= tl[b])
          v = int32_t(rng.randint(-1000, 1000000));  // ignored: never read
        else if (p.lens[b] == 0 || rng.randint(0, 3) == 0)
          v = -1;
        else
          v = int32_t(cache.slot(
              b, rng.randint(0, std::min<int64_t>(p.lens[b], 6) - 1)));  // many duplicates
      }
  }
  std::vector<float> out(B * s_q * h_q * kDv), lse(B * h_q * s_q);
  testing::poison(out);
  testing::poison(lse);
  const SparseDecodeArgs sa =
      host_decode_args({B, s_q, h_q, topk}, qb.data(), DType::bf16, cache.view(), idx.data(),
                       tl.data(), float(scale), out.data(), lse.data(), DType::f32);
  const Status st = sparse_decode(sa);
  ASSERT_TRUE(st.ok()) << st.to_string();
  std::vector<double> qv(kDqk), o(kDv);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < s_q; ++i) {
      std::vector<std::vector<double>> keys;
      for (int64_t j = 0; j < tl[b]; ++j) {
        const int32_t v = idx[(b * s_q + i) * topk + j];
        if (v >= 0) keys.push_back(entry(sa.kv, v));  // a duplicate counts twice
      }
      for (int64_t h = 0; h < h_q; ++h) {
        for (int c = 0; c < kDqk; ++c)
          qv[c] = bf16_to_float(qb[((b * s_q + i) * h_q + h) * kDqk + c]);
        double l;
        naive_attend(qv.data(), keys, float(scale), o.data(), &l);
        // f32 outputs: within a few f32 ulps of the fp64 value.
        const float got_lse = lse[(b * h_q + h) * s_q + i];
        if (keys.empty())
          ASSERT_EQ(got_lse, -kInf);
        else
          ASSERT_NEAR(got_lse, l, 1e-6 * (1 + std::fabs(l)));
        for (int c = 0; c < kDv; ++c)
          ASSERT_NEAR(out[((b * s_q + i) * h_q + h) * kDv + c], o[c], 1e-6 * (1 + std::fabs(o[c])))
              << b << " " << i << " " << h << " " << c;
      }
    }
}

INSTANTIATE_TEST_SUITE_P(Grid, SparseDecode,
                         ::testing::Values(SparseCase{KvFormat::bf16, 64, {0, 1, 70, 130}, 1, 16},
                                           SparseCase{KvFormat::fp8_ds_mla, 16, {3, 33, 64}, 2, 16},
                                           SparseCase{KvFormat::fp8_ds_mla, 1, {5, 9}, 4, 32},
                                           SparseCase{KvFormat::bf16, 128, {2, 200}, 3, 64},
                                           SparseCase{KvFormat::fp8_ds_mla, 64, {150}, 1, 128}),
                         ::mla::testing::PrintedName{});

TEST(Sparse, EmptyListsGiveZeroAndMinusInf) {
  Rng rng(3);
  const auto cache = testing::make_paged_cache(rng, {10, 10}, testing::PagedCacheSpec{});
  const int64_t B = 2, h_q = 16, topk = 64;
  auto q = testing::random_f32(rng, B * h_q * kDqk);
  std::vector<int32_t> idx(B * topk, -1), tl{64, 0};
  for (int j = 0; j < topk; ++j)
    idx[topk + j] = int32_t(cache.slot(1, j % 10));  // past topk_length
  std::vector<float> out(B * h_q * kDv), lse(B * h_q);
  testing::poison(out);
  testing::poison(lse);
  SparseDecodeArgs sa =
      host_decode_args({B, 1, h_q, topk}, q.data(), DType::f32, cache.view(), idx.data(), tl.data(),
                       0.1f, out.data(), lse.data(), DType::f32);
  ASSERT_TRUE(sparse_decode(sa).ok());
  for (float x : out) ASSERT_EQ(x, 0.f);
  for (float x : lse) ASSERT_EQ(x, -kInf);
}

TEST(Sparse, PrefillMatchesNaive) {
  Rng rng(21);
  const int64_t s_q = 3, h_q = 16, s_kv = 50, topk = 64;
  auto q = testing::random_bf16(rng, s_q * h_q * kDqk);
  auto kv = testing::random_bf16(rng, s_kv * kDqk);
  std::vector<int32_t> idx(s_q * topk);
  for (auto& v : idx) v = rng.randint(0, 4) == 0 ? -1 : int32_t(rng.randint(0, s_kv - 1));
  std::fill(idx.begin() + 2 * topk, idx.end(), -1);  // token 2 sees nothing
  std::vector<double> out(s_q * h_q * kDv), lse(s_q * h_q);
  testing::poison(out);
  testing::poison(lse);
  SparsePrefillArgs a;
  a.q = TensorView::make(q.data(), DType::bf16, {s_q, h_q, kDqk});
  a.kv = TensorView::make(kv.data(), DType::bf16, {s_kv, kDqk});
  a.indices = TensorView::make(idx.data(), DType::i32, {s_q, topk});
  a.softmax_scale = 0.1f;
  a.out = TensorView::make(out.data(), DType::f64, {s_q, h_q, kDv});
  a.lse = TensorView::make(lse.data(), DType::f64, {s_q, h_q});
  ASSERT_TRUE(sparse_prefill(a).ok());
  std::vector<double> qv(kDqk), o(kDv);
  for (int64_t i = 0; i < s_q; ++i) {
    std::vector<std::vector<double>> keys;
    for (int64_t j = 0; j < topk; ++j) {
      const int32_t v = idx[i * topk + j];
      if (v < 0) continue;
      std::vector<double> k(kDqk);
      for (int c = 0; c < kDqk; ++c) k[c] = bf16_to_float(kv[v * kDqk + c]);
      keys.push_back(k);
    }
    for (int64_t h = 0; h < h_q; ++h) {
      for (int c = 0; c < kDqk; ++c) qv[c] = bf16_to_float(q[(i * h_q + h) * kDqk + c]);
      double l;
      naive_attend(qv.data(), keys, double(0.1f), o.data(), &l);
      if (keys.empty())
        ASSERT_EQ(lse[i * h_q + h], -kInf);
      else
        ASSERT_NEAR(lse[i * h_q + h], l, 1e-11 * (1 + std::fabs(l)));
      for (int c = 0; c < kDv; ++c) ASSERT_NEAR(out[(i * h_q + h) * kDv + c], o[c], 1e-11);
    }
  }
  idx[5] = int32_t(s_kv);
  expect_error(sparse_prefill(a), Errc::out_of_range, "indices[0][5] = 50 is past s_kv = 50");
  idx[5] = -7;
  expect_error(sparse_prefill(a), Errc::out_of_range, "indices[0][5] = -7 is negative");
  idx[5] = 0;
  a.kv.shape[1] = 512;
  expect_error(sparse_prefill(a), Errc::invalid_shape, "kv");
}

// Prefill's optional topk_length [s_q]: token i uses entries [0, topk_length[i])
// only; the result equals the same lists with the tail set to -1, whatever
// the tail holds (not read, not checked).
TEST(Sparse, PrefillTopkLength) {
  Rng rng(22);
  const int64_t s_q = 4, h_q = 16, s_kv = 40, topk = 32;
  auto q = testing::random_bf16(rng, s_q * h_q * kDqk);
  auto kv = testing::random_bf16(rng, s_kv * kDqk);
  std::vector<int32_t> idx(s_q * topk), cut(s_q * topk), tl{32, 0, 5, 17};
  for (int64_t i = 0; i < s_q; ++i)
    for (int64_t j = 0; j < topk; ++j) {
      const bool used = j < tl[i];
      idx[i * topk + j] = used ? int32_t(rng.randint(0, s_kv - 1)) : int32_t(1000 + j);
      cut[i * topk + j] = used ? idx[i * topk + j] : -1;
    }
  std::vector<double> out(s_q * h_q * kDv), lse(s_q * h_q), out2(out.size()), lse2(lse.size());
  testing::poison(out), testing::poison(lse);
  SparsePrefillArgs a;
  a.q = TensorView::make(q.data(), DType::bf16, {s_q, h_q, kDqk});
  a.kv = TensorView::make(kv.data(), DType::bf16, {s_kv, kDqk});
  a.indices = TensorView::make(idx.data(), DType::i32, {s_q, topk});
  a.topk_length = TensorView::make(tl.data(), DType::i32, {s_q});
  a.softmax_scale = 0.1f;
  a.out = TensorView::make(out.data(), DType::f64, {s_q, h_q, kDv});
  a.lse = TensorView::make(lse.data(), DType::f64, {s_q, h_q});
  ASSERT_TRUE(sparse_prefill(a).ok());
  SparsePrefillArgs b = a;
  b.topk_length = {};
  b.indices.data = cut.data();
  b.out.data = out2.data(), b.lse.data = lse2.data();
  ASSERT_TRUE(sparse_prefill(b).ok());
  EXPECT_EQ(out, out2);
  EXPECT_EQ(lse, lse2);
  for (int64_t h = 0; h < h_q; ++h) EXPECT_EQ(lse[h_q + h], -kInf) << "topk_length 0";
  tl[3] = 33;
  expect_error(sparse_prefill(a), Errc::out_of_range, "topk_length[3] = 33 is past topk = 32");
  tl[3] = -1;
  expect_error(sparse_prefill(a), Errc::out_of_range, "topk_length[3] = -1 is negative");
  tl[3] = 17;
  a.topk_length = TensorView::make(tl.data(), DType::i32, {s_q - 1});
  expect_error(sparse_prefill(a), Errc::invalid_shape, "topk_length");
}

// Prefill over fp8_ds_mla rows [s_kv, 656] (a cached fp8 prefix) equals prefill
// over the same rows dequantised (read_kv) as f32 [s_kv, 576], bit for bit:
// both read the entry through the one decoder.
TEST(Sparse, PrefillFp8RowsEqualDequantisedRows) {
  Rng rng(23);
  const int64_t s_q = 3, h_q = 16, s_kv = 37, topk = 24;
  using L = Fp8DsMlaLayout;
  testing::PagedCacheSpec spec;
  spec.format = KvFormat::fp8_ds_mla;
  std::vector<uint8_t> rows(s_kv * L::kEntryBytes);
  for (int64_t r = 0; r < s_kv; ++r)
    testing::fill_random_entry(rng, spec, &rows[r * L::kEntryBytes]);
  std::vector<float> c_kv(s_kv * kDv), rope(s_kv * kDr), deq(s_kv * kDqk);
  std::vector<int64_t> slots(s_kv);
  for (int64_t r = 0; r < s_kv; ++r) slots[r] = r;
  ReadKvArgs rd;
  rd.cache.format = KvFormat::fp8_ds_mla;
  rd.cache.data = TensorView::make(rows.data(), DType::u8, {s_kv, 1, 1, L::kEntryBytes});
  rd.slots = TensorView::make(slots.data(), DType::i64, {s_kv});
  rd.c_kv = TensorView::make(c_kv.data(), DType::f32, {s_kv, kDv});
  rd.k_rope = TensorView::make(rope.data(), DType::f32, {s_kv, kDr});
  ASSERT_TRUE(read_kv(rd).ok());
  for (int64_t r = 0; r < s_kv; ++r) {
    std::copy(&c_kv[r * kDv], &c_kv[(r + 1) * kDv], &deq[r * kDqk]);
    std::copy(&rope[r * kDr], &rope[(r + 1) * kDr], &deq[r * kDqk + kDv]);
  }
  auto q = testing::random_bf16(rng, s_q * h_q * kDqk);
  std::vector<int32_t> idx(s_q * topk);
  for (auto& v : idx) v = rng.randint(0, 5) == 0 ? -1 : int32_t(rng.randint(0, s_kv - 1));
  std::vector<double> out(s_q * h_q * kDv), lse(s_q * h_q), out2(out.size()), lse2(lse.size());
  testing::poison(out), testing::poison(lse), testing::poison(out2), testing::poison(lse2);
  SparsePrefillArgs a;
  a.q = TensorView::make(q.data(), DType::bf16, {s_q, h_q, kDqk});
  a.kv = TensorView::make(rows.data(), DType::u8, {s_kv, L::kEntryBytes});
  a.kv_format = KvFormat::fp8_ds_mla;
  a.indices = TensorView::make(idx.data(), DType::i32, {s_q, topk});
  a.softmax_scale = 0.1f;
  a.out = TensorView::make(out.data(), DType::f64, {s_q, h_q, kDv});
  a.lse = TensorView::make(lse.data(), DType::f64, {s_q, h_q});
  ASSERT_TRUE(sparse_prefill(a).ok());
  SparsePrefillArgs b = a;
  b.kv = TensorView::make(deq.data(), DType::f32, {s_kv, kDqk});
  b.kv_format = KvFormat::bf16;
  b.out.data = out2.data(), b.lse.data = lse2.data();
  ASSERT_TRUE(sparse_prefill(b).ok());
  EXPECT_EQ(out, out2);
  EXPECT_EQ(lse, lse2);
  // The format names the shape it wants.
  a.kv = b.kv;
  expect_error(sparse_prefill(a), Errc::invalid_shape, "kv");
  b.kv = TensorView::make(rows.data(), DType::u8, {s_kv, L::kEntryBytes});
  expect_error(sparse_prefill(b), Errc::invalid_shape, "kv");
  a.kv = TensorView::make(deq.data(), DType::f32, {s_kv / 4, L::kEntryBytes});
  expect_error(sparse_prefill(a), Errc::invalid_dtype, "kv");
}

TEST(SparseValidation, Errors) {
  Rng rng(4);
  // capacity (2+2+3) * 16
  const auto cache = testing::make_paged_cache(rng, {20, 20}, {.page_size = 16});
  const int64_t B = 2, h_q = 16, topk = 64, cap = cache.num_pages * 16;
  auto q = testing::random_f32(rng, B * h_q * kDqk);
  std::vector<int32_t> idx(B * topk, -1), tl{64, 64};
  std::vector<float> out(B * h_q * kDv), lse(B * h_q);
  SparseDecodeArgs sa =
      host_decode_args({B, 1, h_q, topk}, q.data(), DType::f32, cache.view(), idx.data(), tl.data(),
                       0.1f, out.data(), lse.data(), DType::f32);
  ASSERT_TRUE(sparse_decode(sa).ok());
  idx[topk + 3] = int32_t(cap);
  expect_error(sparse_decode(sa), Errc::out_of_range,
               fmt::format("indices[1][0][3] = {} is past the cache capacity", cap));
  tl[1] = 3;  // the bad entry is now past topk_length: ignored
  EXPECT_TRUE(sparse_decode(sa).ok());
  tl[1] = 65;
  expect_error(sparse_decode(sa), Errc::out_of_range, "topk_length[1] = 65 is past topk = 64");
  tl[1] = -1;
  expect_error(sparse_decode(sa), Errc::out_of_range, "topk_length[1] = -1 is negative");
  tl[1] = 64;
  idx[topk + 3] = -2;
  expect_error(sparse_decode(sa), Errc::out_of_range, "indices[1][0][3] = -2 is negative");
  idx[topk + 3] = -1;
  {
    auto b = sa;
    b.q.shape[3] = 512;
    expect_error(sparse_decode(b), Errc::invalid_shape, "q");
  }
  {
    auto b = sa;
    b.lse = TensorView::make(lse.data(), DType::f32, {B, 1, h_q});
    expect_error(sparse_decode(b), Errc::invalid_shape, "lse");
  }
  {
    auto b = sa;
    b.indices.dtype = DType::i64;
    expect_error(sparse_decode(b), Errc::invalid_dtype, "indices: dtype i64");
  }
  {
    auto b = sa;
    b.softmax_scale = 0.f;
    expect_error(sparse_decode(b), Errc::invalid_value, "softmax_scale = 0");
  }
  {
    auto b = sa;
    b.kv.data.dtype = DType::u8;  // bf16 format over bytes
    expect_error(sparse_decode(b), Errc::invalid_dtype, "kv.data");
  }
}

}  // namespace
}  // namespace mla
