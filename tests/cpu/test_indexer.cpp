// Lightning indexer: quantisation against hand-computed codes and scales, the
// logits against an independent naive computation and against the unquantised
// formula within the FP8 error bound, causal masking, prefill = decode, and the
// validation errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/expect_status.hpp"
#include "common/param_name.hpp"
#include "common/random.hpp"
#include "mla/indexer.hpp"
#include "mla/numeric.hpp"
#include "reference/fp8_quant.hpp"

namespace mla {
namespace {

using testing::expect_error;

using L = IndexerCacheLayout;
using testing::Rng;
constexpr float kInf = std::numeric_limits<float>::infinity();

// A pool of indexer pages, 0xff (NaN) everywhere nothing was written, with an
// optional padding between pages.
struct IndexerPool {
  std::vector<uint8_t> bytes;
  IndexerCacheView view;
  IndexerPool(int64_t num_pages, int64_t pad = 0)
      : bytes(std::max<int64_t>(num_pages, 1) * (L::kPageBytes + pad), 0xff) {
    view.data = TensorView::make(bytes.data(), DType::u8, {num_pages, L::kPageBytes});
    view.data.strides[0] = L::kPageBytes + pad;
  }
  const uint8_t* codes(int64_t slot) const {
    return bytes.data() + (slot / 64) * view.data.strides[0] + (slot % 64) * 128;
  }
  float scale(int64_t slot) const {
    float s;
    std::memcpy(&s, bytes.data() + (slot / 64) * view.data.strides[0] + 8192 + 4 * (slot % 64), 4);
    return s;
  }
};

TEST(Indexer, ScaleRule) {
  // s = 2^ceil(log2(max(amax, 1e-4) / 448)).
  EXPECT_EQ(reference::indexer_scale(448.f), 1.f);
  EXPECT_EQ(reference::indexer_scale(449.f), 2.f);
  EXPECT_EQ(reference::indexer_scale(3.f), std::ldexp(1.f, -7));   // 3/448 = 0.0067 -> 2^-7
  EXPECT_EQ(reference::indexer_scale(0.f), std::ldexp(1.f, -22));  // 1e-4/448 = 2.2e-7 -> 2^-22
  // The floor sits on amax, not on amax/448 (unlike the fp8_ds_mla entry: 2^-13).
  EXPECT_EQ(reference::fp8_ds_mla_scale(0.f), std::ldexp(1.f, -13));
}

TEST(Indexer, AppendKeysWritesHandComputedBytes) {
  IndexerPool pool(2, 16);
  std::vector<float> k(2 * 128, 0.f);
  k[0] = 3.f;        // s = 2^-7: 384 = 1.5 * 2^8 -> 0x7c
  k[1] = -1.f;       // -128 -> 0xf0
  k[2] = 0.1f;       // 12.8 -> 13 -> 0x55
  k[128] = 1e-9f;    // amax below the floor: s = 2^-22; 1e-9 / 2^-22 = 0.0042 -> 2 * 2^-9 -> 0x02
  k[129] = -1e-12f;  // -> -0: 0x80
  std::vector<int64_t> slots{70, 5};
  ASSERT_TRUE(append_indexer_keys({TensorView::make(k.data(), DType::f32, {2, 128}),
                                   TensorView::make(slots.data(), DType::i64, {2}), pool.view})
                  .ok());
  EXPECT_EQ(pool.codes(70)[0], 0x7c);
  EXPECT_EQ(pool.codes(70)[1], 0xf0);
  EXPECT_EQ(pool.codes(70)[2], 0x55);
  EXPECT_EQ(pool.codes(70)[3], 0x00);
  EXPECT_EQ(pool.scale(70), std::ldexp(1.f, -7));
  EXPECT_EQ(pool.codes(5)[0], 0x02);
  EXPECT_EQ(pool.codes(5)[1], 0x80);
  EXPECT_EQ(pool.scale(5), std::ldexp(1.f, -22));
  // Byte layout: slot 70 is page 1 (stride 8448 + 16), token 6.
  EXPECT_EQ(pool.bytes[(8448 + 16) + 6 * 128], 0x7c);
  float s;
  std::memcpy(&s, &pool.bytes[(8448 + 16) + 8192 + 6 * 4], 4);
  EXPECT_EQ(s, std::ldexp(1.f, -7));
  EXPECT_EQ(pool.codes(69)[0], 0xff);  // neighbours untouched
  EXPECT_TRUE(std::isnan(pool.scale(71))) << "the poison (NaN) must stay";
}

TEST(Indexer, QueryQuantisationFoldsScaleIntoWeight) {
  std::vector<float> q(64 * 128), w(64);
  Rng rng(5);
  for (auto& x : q) x = float(rng.uniform(-1, 1));
  for (auto& x : w) x = float(rng.uniform(-2, 2));
  q[0] = 3.f;  // head 0 amax 3 -> s = 2^-7
  std::vector<uint8_t> q8(64 * 128, 0xff);
  std::vector<float> wf(64, NAN);
  QuantizeIndexerQueryArgs a{TensorView::make(q.data(), DType::f32, {1, 64, 128}),
                             TensorView::make(w.data(), DType::f32, {1, 64}),
                             TensorView::make(q8.data(), DType::e4m3, {1, 64, 128}),
                             TensorView::make(wf.data(), DType::f32, {1, 64})};
  ASSERT_TRUE(quantize_indexer_query(a).ok());
  EXPECT_EQ(q8[0], 0x7c);
  EXPECT_EQ(wf[0], float(double(w[0]) / 8.0 * std::ldexp(1.0, -7) / std::sqrt(128.0)));
  for (int h = 0; h < 64; ++h) {
    float amax = 0.f;
    for (int d = 0; d < 128; ++d) amax = std::max(amax, std::fabs(q[h * 128 + d]));
    const double s = reference::indexer_scale(amax);
    EXPECT_FLOAT_EQ(wf[h], float(w[h] * s / std::sqrt(64.0 * 128.0))) << h;
    for (int d = 0; d < 128; ++d)  // e4m3 keeps 4 significant bits: |err| <= 2^-4 |x| + 2^-10 s
      ASSERT_LE(std::fabs(e4m3_to_float(q8[h * 128 + d]) * s - q[h * 128 + d]),
                std::ldexp(std::fabs(q[h * 128 + d]), -4) + std::ldexp(s, -10));
  }
}

// The paged decode case, checked three ways.
struct DecodeCase {
  std::vector<int32_t> lens;
  int s_q;
  int64_t max_len;
};
void PrintTo(const DecodeCase& c, std::ostream* os) {
  *os << "L" << testing::join(c.lens) << " s_q" << c.s_q << " max_len" << c.max_len;
}

class IndexerDecode : public ::testing::TestWithParam<DecodeCase> {};

TEST_P(IndexerDecode, MatchesNaiveAndUnquantisedFormula) {
  const auto p = GetParam();
  const int64_t B = p.lens.size(), s_q = p.s_q, N = p.max_len;
  Rng rng(100 + B * 7 + s_q);
  // Pages handed out in shuffled order, a spare column of garbage ids.
  int64_t max_pages = 1, used = 0;
  for (int32_t l : p.lens)
    max_pages = std::max<int64_t>(max_pages, (l + 63) / 64), used += (l + 63) / 64;
  max_pages += 1;
  const int64_t num_pages = used + 2;
  IndexerPool pool(num_pages, 32);
  std::vector<int32_t> ids(num_pages);
  for (int64_t i = 0; i < num_pages; ++i) ids[i] = int32_t(i);
  rng.shuffle(ids);
  std::vector<int32_t> bt(B * max_pages, 999999);
  size_t next = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < (p.lens[b] + 63) / 64; ++j) bt[b * max_pages + j] = ids[next++];

  // Keys of every request, varied magnitudes, written through append_indexer_keys.
  std::vector<std::vector<float>> keys(B);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = p.lens[b];
    keys[b] = testing::random_f32(rng, len * 128);
    for (int64_t t = 0; t < len; ++t)
      for (int d = 0; d < 128; ++d) keys[b][t * 128 + d] *= std::ldexp(1.f, int(t % 9) - 4);
    std::vector<int64_t> slots(len);
    for (int64_t t = 0; t < len; ++t) slots[t] = int64_t(bt[b * max_pages + t / 64]) * 64 + t % 64;
    ASSERT_TRUE(append_indexer_keys({TensorView::make(keys[b].data(), DType::f32, {len, 128}),
                                     TensorView::make(slots.data(), DType::i64, {len}), pool.view})
                    .ok());
  }
  // Queries (bf16 input) and weights.
  auto qb = testing::random_bf16(rng, B * s_q * 64 * 128, -2, 2);
  auto w = testing::random_f32(rng, B * s_q * 64, -1, 1);
  std::vector<uint8_t> q8(qb.size());
  std::vector<float> wf(w.size());
  ASSERT_TRUE(quantize_indexer_query({TensorView::make(qb.data(), DType::bf16, {B, s_q, 64, 128}),
                                      TensorView::make(w.data(), DType::f32, {B, s_q, 64}),
                                      TensorView::make(q8.data(), DType::e4m3, {B, s_q, 64, 128}),
                                      TensorView::make(wf.data(), DType::f32, {B, s_q, 64})})
                  .ok());

  std::vector<float> logits(B * s_q * N);
  testing::poison(logits);
  std::vector<int32_t> lens = p.lens;
  IndexerLogitsDecodeArgs a{TensorView::make(q8.data(), DType::e4m3, {B, s_q, 64, 128}),
                            TensorView::make(wf.data(), DType::f32, {B, s_q, 64}),
                            pool.view,
                            TensorView::make(bt.data(), DType::i32, {B, max_pages}),
                            TensorView::make(lens.data(), DType::i32, {B}),
                            TensorView::make(logits.data(), DType::f32, {B, s_q, N})};
  const Status st = indexer_logits_decode(a);
  ASSERT_TRUE(st.ok()) << st.to_string();

  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < s_q; ++i) {
      const int64_t limit = std::max<int64_t>(p.lens[b] - (s_q - 1 - i), 0);
      for (int64_t pos = 0; pos < N; ++pos) {
        const float got = logits[(b * s_q + i) * N + pos];
        if (pos >= limit) {
          ASSERT_EQ(got, -kInf) << b << " " << i << " " << pos;
          continue;
        }
        const int64_t slot = int64_t(bt[b * max_pages + pos / 64]) * 64 + pos % 64;
        const uint8_t* kc = pool.codes(slot);
        const double ks = pool.scale(slot);
        // Naive, from the raw bytes: per head the dot of decoded codes.
        double naive = 0.0, full = 0.0, bound = 0.0;
        for (int h = 0; h < 64; ++h) {
          const size_t qo = ((b * s_q + i) * 64 + h) * 128;
          double dot = 0.0, dot_full = 0.0, dot_err = 0.0;
          float qamax = 0.f;
          for (int d = 0; d < 128; ++d)
            qamax = std::max(qamax, std::fabs(bf16_to_float(qb[qo + d])));
          const double qs = reference::indexer_scale(qamax);
          for (int d = 0; d < 128; ++d) {
            dot += double(e4m3_to_float(q8[qo + d])) * e4m3_to_float(kc[d]);
            const double qv = bf16_to_float(qb[qo + d]), kv = keys[b][pos * 128 + d];
            dot_full += qv * kv;
            // |q - s_q q8| <= eq, |k - s_k k8| <= ek (4 significant bits, subnormal floor).
            const double eq = std::ldexp(std::fabs(qv), -4) + std::ldexp(qs, -10);
            const double ek = std::ldexp(std::fabs(kv), -4) + std::ldexp(ks, -10);
            dot_err += std::fabs(qv) * ek + std::fabs(kv) * eq + eq * ek;
          }
          naive += double(wf[(b * s_q + i) * 64 + h]) * std::max(dot, 0.0);
          const double wh = double(w[(b * s_q + i) * 64 + h]) / std::sqrt(64.0 * 128.0);
          full += wh * std::max(dot_full, 0.0);
          bound += std::fabs(wh) * dot_err;  // ReLU is 1-Lipschitz
        }
        naive *= ks;
        // Same math in a different order: equal up to the f32 rounding of the output.
        ASSERT_NEAR(got, naive, 1e-6 * std::fabs(naive) + 1e-30) << b << " " << i << " " << pos;
        // Against the unquantised indexer: the FP8 error bound above (+ w' rounding to f32).
        ASSERT_LE(std::fabs(got - full), bound * (1 + 1e-6) + 1e-6 * std::fabs(full))
            << b << " " << i << " " << pos;
      }
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, IndexerDecode,
                         ::testing::Values(DecodeCase{{0, 1, 70}, 1, 80},
                                           DecodeCase{{130, 64, 2}, 3, 140},
                                           DecodeCase{{5, 200}, 4, 256}, DecodeCase{{63}, 2, 63}),
                         ::mla::testing::PrintedName{});

// Prefill over a flat key array equals decode over the same keys in a paged
// cache when k_end is the causal limit (one request, the T new tokens).
TEST(Indexer, PrefillEqualsDecodeOnTheSameKeys) {
  const int64_t len = 150, T = 4, N = len;
  Rng rng(77);
  IndexerPool pool(3);
  std::vector<int32_t> bt{2, 0, 1};
  auto keys = testing::random_f32(rng, len * 128, -3, 3);
  std::vector<int64_t> slots(len);
  for (int64_t t = 0; t < len; ++t) slots[t] = int64_t(bt[t / 64]) * 64 + t % 64;
  ASSERT_TRUE(append_indexer_keys({TensorView::make(keys.data(), DType::f32, {len, 128}),
                                   TensorView::make(slots.data(), DType::i64, {len}), pool.view})
                  .ok());
  std::vector<uint8_t> k8(len * 128);
  std::vector<float> ks(len);
  for (int64_t t = 0; t < len; ++t) {
    std::memcpy(&k8[t * 128], pool.codes(slots[t]), 128);
    ks[t] = pool.scale(slots[t]);
  }
  std::vector<uint8_t> q8(T * 64 * 128);
  for (auto& c : q8) do
      c = uint8_t(rng.randint(0, 255));
    while ((c & 0x7f) == 0x7f);
  auto wf = testing::random_f32(rng, T * 64);
  std::vector<float> dec(T * N), pre(T * N);
  testing::poison(dec);
  testing::poison(pre);
  int32_t L32 = int32_t(len);
  ASSERT_TRUE(indexer_logits_decode({TensorView::make(q8.data(), DType::e4m3, {1, T, 64, 128}),
                                     TensorView::make(wf.data(), DType::f32, {1, T, 64}), pool.view,
                                     TensorView::make(bt.data(), DType::i32, {1, 3}),
                                     TensorView::make(&L32, DType::i32, {1}),
                                     TensorView::make(dec.data(), DType::f32, {1, T, N})})
                  .ok());
  std::vector<int32_t> ks0(T, 0), ke(T);
  for (int64_t i = 0; i < T; ++i) ke[i] = int32_t(len - (T - 1 - i));
  ks0[3] = 10;  // a window start too: positions before it become -inf
  IndexerLogitsPrefillArgs pa{TensorView::make(q8.data(), DType::e4m3, {T, 64, 128}),
                              TensorView::make(wf.data(), DType::f32, {T, 64}),
                              TensorView::make(k8.data(), DType::e4m3, {N, 128}),
                              TensorView::make(ks.data(), DType::f32, {N}),
                              TensorView::make(ks0.data(), DType::i32, {T}),
                              TensorView::make(ke.data(), DType::i32, {T}),
                              TensorView::make(pre.data(), DType::f32, {T, N})};
  ASSERT_TRUE(indexer_logits_prefill(pa).ok());
  for (int64_t i = 0; i < T; ++i)
    for (int64_t s = 0; s < N; ++s) {
      if (s < ks0[i])
        EXPECT_EQ(pre[i * N + s], -kInf);
      else
        ASSERT_EQ(pre[i * N + s], dec[i * N + s]) << i << " " << s;
    }
  // Validation of the ranges.
  ke[1] = int32_t(N + 1);
  expect_error(indexer_logits_prefill(pa), Errc::out_of_range, "k_end[1] = 151 is past N = 150");
  ke[1] = 3;
  ks0[1] = 5;
  expect_error(indexer_logits_prefill(pa), Errc::out_of_range,
               "k_end[1] = 3 is before k_start[1] = 5");
  ks0[1] = -1;
  expect_error(indexer_logits_prefill(pa), Errc::out_of_range, "k_start[1] = -1 is negative");
}

TEST(IndexerValidation, Errors) {
  IndexerPool pool(2);
  std::vector<float> k(3 * 128, 1.f);
  std::vector<int64_t> slots{0, 127, 128};
  AppendIndexerKeysArgs ap{TensorView::make(k.data(), DType::f32, {3, 128}),
                           TensorView::make(slots.data(), DType::i64, {3}), pool.view};
  expect_error(append_indexer_keys(ap), Errc::out_of_range, "slots[2] = 128");
  slots[2] = -1;
  EXPECT_TRUE(append_indexer_keys(ap).ok());
  ap.keys.shape[1] = 64;
  expect_error(append_indexer_keys(ap), Errc::invalid_shape, "keys");
  ap.keys.shape[1] = 128;
  ap.cache.data.shape[1] = 8192;
  expect_error(append_indexer_keys(ap), Errc::invalid_shape, "cache.data");
  ap.cache = pool.view;
  ap.cache.data.strides[0] = 8000;
  expect_error(append_indexer_keys(ap), Errc::invalid_stride, "page stride 8000");
  ap.cache = pool.view;
  ap.cache.data.dtype = DType::f32;
  expect_error(append_indexer_keys(ap), Errc::invalid_dtype, "cache.data: dtype f32");
  ap.cache = pool.view;

  // Decode: block table entries and lengths.
  std::vector<uint8_t> q8(64 * 128, 0x38);
  std::vector<float> wf(64, 1.f), logits(100);
  std::vector<int32_t> bt{1, 5}, len{100};
  IndexerLogitsDecodeArgs d{TensorView::make(q8.data(), DType::e4m3, {1, 1, 64, 128}),
                            TensorView::make(wf.data(), DType::f32, {1, 1, 64}),
                            pool.view,
                            TensorView::make(bt.data(), DType::i32, {1, 2}),
                            TensorView::make(len.data(), DType::i32, {1}),
                            TensorView::make(logits.data(), DType::f32, {1, 1, 100})};
  expect_error(indexer_logits_decode(d), Errc::out_of_range,
               "block_table[0][1] = 5 is past num_pages = 2");
  bt[1] = -2;
  expect_error(indexer_logits_decode(d), Errc::out_of_range, "block_table[0][1] = -2 is negative");
  bt[1] = 0;
  EXPECT_TRUE(indexer_logits_decode(d).ok());
  len[0] = 101;
  expect_error(indexer_logits_decode(d), Errc::out_of_range,
               "cache_seqlens[0] = 101 is past max_len = 100");
  len[0] = -1;
  expect_error(indexer_logits_decode(d), Errc::out_of_range, "cache_seqlens[0] = -1 is negative");
  len[0] = 10;
  d.q8.dtype = DType::u8;
  expect_error(indexer_logits_decode(d), Errc::invalid_dtype, "q8: dtype u8");
  d.q8.dtype = DType::e4m3;
  d.w_folded.shape[2] = 32;
  expect_error(indexer_logits_decode(d), Errc::invalid_shape, "w_folded");
  d.w_folded.shape[2] = 64;
  d.q8.shape[1] = 0;  // a valid empty step, but w_folded is not [B, 0, 64]
  expect_error(indexer_logits_decode(d), Errc::invalid_shape, "w_folded");
}

}  // namespace
}  // namespace mla
