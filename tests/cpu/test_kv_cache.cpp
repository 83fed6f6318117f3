// Paged latent cache: the fp8_ds_mla byte layout against bytes computed by hand,
// the round-trip error bound of both formats, padded page strides, slot -1, and
// the validation errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/expect_status.hpp"
#include "common/param_name.hpp"
#include "common/random.hpp"
#include "mla/kv_cache.hpp"
#include "mla/numeric.hpp"
#include "reference/fp8_quant.hpp"
#include "reference/kv_cache_ref.hpp"

namespace mla {
namespace {

using testing::expect_error;

// An empty pool of pages (every byte 0xff, which is NaN in bf16, e4m3 and as
// an fp8 scale), from the shared test cache; page_pad in elements.
struct Pool {
  testing::PagedCache c;
  KvCacheView view;
  Pool(KvFormat format, int64_t num_pages, int64_t page_size, int64_t page_pad = 0) {
    testing::Rng rng(1);
    testing::PagedCacheSpec spec;
    spec.format = format;
    spec.page_size = page_size;
    spec.page_pad = page_pad;
    spec.spare_pages = num_pages;
    c = testing::make_paged_cache(rng, {}, spec);
    view = c.view();
  }
  const uint8_t* bytes() const { return reinterpret_cast<const uint8_t*>(c.storage.data()); }
  int64_t capacity() const { return view.num_pages() * view.page_size(); }
  // Appends one token (c_kv [512], k_rope [64] f32) at `slot`.
  void append_one(std::vector<float>& c_kv, std::vector<float>& k_rope, int64_t slot) {
    AppendKvArgs a{TensorView::make(c_kv.data(), DType::f32, {1, 512}),
                   TensorView::make(k_rope.data(), DType::f32, {1, 64}),
                   TensorView::make(&slot, DType::i64, {1}), view};
    const Status st = append_kv(a);
    ASSERT_TRUE(st.ok()) << st.to_string();
  }
};
constexpr uint8_t kPoison = 0xff;

std::vector<float> random_normal(size_t n, uint32_t seed, float sigma = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// One token written to slot 0 of a one-page fp8 cache; every byte below was
// worked out by hand from the format (e4m3: bias 7, 3 mantissa bits).
TEST(KvCache, Fp8EntryBytesMatchHandComputed) {
  std::vector<float> c(512, 0.f), r(64, 0.f);
  // Group 0: amax 448 -> s = 2^ceil(log2(1)) = 1.
  c[0] = 1.0f;    // 2^0: exp field 7 -> 0x38
  c[1] = -0.5f;   // -2^-1: sign | exp 6 -> 0xb0
  c[2] = 448.f;   // largest finite e4m3 -> 0x7e
  c[3] = 0.3f;    // in [0.25,0.5): exp 5, mantissa (1.2-1)*8 = 1.6 -> 2: 0x2a
  c[4] = -1e-6f;  // rounds to zero, keeps the sign: 0x80
  // Group 1: amax 3 -> 3/448 = 0.0067 -> s = 2^-7.
  c[128] = 3.0f;  // 384 = 1.5 * 2^8: exp 15, mantissa 4 -> 0x7c
  c[129] = 1.0f;  // 128 = 2^7: exp 14 -> 0x70
  c[130] = 0.1f;  // 12.8 in [8,16): (1.6-1)*8 = 4.8 -> 5: exp 10 -> 0x55
  // Group 2: amax 1e-5 -> amax/448 below the 1e-4 floor -> s = 2^ceil(log2 1e-4) = 2^-13.
  c[256] = 1e-5f;  // 0.08192 in [2^-4, 2^-3): exp 3, (1.31072-1)*8 = 2.49 -> 2: 0x1a
  // Group 3: amax 1 -> 1/448 = 0.00223 -> s = 2^-8.
  c[384] = 1.0f;                          // 256 = 2^8: exp 15 -> 0x78
  c[385] = -0.75f;                        // -192 = -1.5 * 2^7: 0x80 | exp 14 | 4 -> 0xf4
  c[386] = std::ldexp(1.0625f, -8);       // 1.0625: halfway 1.0 / 1.125, ties to even -> 0x38
  r[0] = 1.0f;                            // bf16 0x3f80
  r[1] = -2.0f;                           // bf16 0xc000
  r[2] = 1.0f + std::ldexp(1.f, -8);      // halfway, ties to even -> 0x3f80
  r[3] = 1.0f + 3 * std::ldexp(1.f, -8);  // -> 0x3f82

  std::vector<uint8_t> want(656, 0x00);
  want[0] = 0x38;
  want[1] = 0xb0;
  want[2] = 0x7e;
  want[3] = 0x2a;
  want[4] = 0x80;
  want[128] = 0x7c;
  want[129] = 0x70;
  want[130] = 0x55;
  want[256] = 0x1a;
  want[384] = 0x78;
  want[385] = 0xf4;
  want[386] = 0x38;
  // Scales, fp32 little endian: 1.0 = 0x3f800000, 2^-7 = 0x3c000000,
  // 2^-13 = 0x39000000, 2^-8 = 0x3b800000.
  const uint8_t scales[16] = {0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x3c,
                              0x00, 0x00, 0x00, 0x39, 0x00, 0x00, 0x80, 0x3b};
  std::memcpy(&want[512], scales, 16);
  // Rope, bf16 little endian at byte 528.
  want[528] = 0x80;
  want[529] = 0x3f;
  want[530] = 0x00;
  want[531] = 0xc0;
  want[532] = 0x80;
  want[533] = 0x3f;
  want[534] = 0x82;
  want[535] = 0x3f;

  Pool cache(KvFormat::fp8_ds_mla, 1, 2);
  int64_t slot = 0;
  cache.append_one(c, r, slot);
  for (int i = 0; i < 656; ++i) EXPECT_EQ(cache.bytes()[i], want[i]) << "byte " << i;
  // The second slot of the page was not touched.
  for (int i = 656; i < 2 * 656; ++i) ASSERT_EQ(cache.bytes()[i], kPoison);

  // Read back: each value is code * scale, exactly.
  std::vector<float> c_out(512, NAN), r_out(64, NAN);
  ReadKvArgs rd{cache.view, TensorView::make(&slot, DType::i64, {1}),
                TensorView::make(c_out.data(), DType::f32, {1, 512}),
                TensorView::make(r_out.data(), DType::f32, {1, 64})};
  ASSERT_TRUE(read_kv(rd).ok());
  EXPECT_EQ(c_out[1], -0.5f);
  EXPECT_EQ(c_out[3], 0.3125f);         // 0x2a = 1.25 * 2^-2
  EXPECT_EQ(c_out[130], 13.f / 128.f);  // 0x55 = 13 * 2^-7 after the scale
  EXPECT_EQ(c_out[256], 1.25f * std::ldexp(1.f, -4) * std::ldexp(1.f, -13));
  EXPECT_EQ(c_out[386], std::ldexp(1.f, -8));
  EXPECT_TRUE(std::signbit(c_out[4]) && c_out[4] == 0.f);
  EXPECT_EQ(r_out[3], 1.0f + std::ldexp(1.f, -6));
}

// fp8_e4m3 (vLLM's layout): every value, rope included, is code = e4m3(v / s)
// with the cache's one scale; bytes worked out by hand with s = 0.5.
TEST(KvCache, Fp8E4m3EntryBytesMatchHandComputed) {
  std::vector<float> c(512, 0.f), r(64, 0.f);
  c[0] = 0.5f;                   // /0.5 = 1: exp field 7 -> 0x38
  c[1] = -0.25f;                 // -0.5: 0xb0
  c[2] = 1000.f;                 // 2000 saturates to 448 -> 0x7e
  c[3] = -INFINITY;              // saturates to -448 -> 0xfe
  c[4] = NAN;                    // 0x7f
  c[5] = 0.5f * 1.0625f;         // 1.0625: tie between 1.0 and 1.125, even -> 0x38
  c[6] = -1e-7f;                 // rounds to zero, keeps the sign: 0x80
  r[0] = 1.5f;                   // 3 = 1.5 * 2^1: exp 8, mantissa 4 -> 0x44
  r[63] = std::ldexp(1.f, -10);  // 2^-9: the smallest subnormal, 0x01
  std::vector<uint8_t> want(576, 0x00);
  want[0] = 0x38;
  want[1] = 0xb0;
  want[2] = 0x7e;
  want[3] = 0xfe;
  want[4] = 0x7f;
  want[5] = 0x38;
  want[6] = 0x80;
  want[512] = 0x44;
  want[575] = 0x01;

  Pool cache(KvFormat::fp8_e4m3, 1, 2);
  cache.c.scale = 0.5f;
  int64_t slot = 1;
  cache.append_one(c, r, slot);
  for (int i = 0; i < 576; ++i) ASSERT_EQ(cache.bytes()[i], kPoison) << "slot 0, byte " << i;
  for (int i = 0; i < 576; ++i) EXPECT_EQ(cache.bytes()[576 + i], want[i]) << "byte " << i;

  // Read back: code * s.
  std::vector<float> c_out(512, 7.f), r_out(64, 7.f);
  ReadKvArgs rd{cache.view, TensorView::make(&slot, DType::i64, {1}),
                TensorView::make(c_out.data(), DType::f32, {1, 512}),
                TensorView::make(r_out.data(), DType::f32, {1, 64})};
  ASSERT_TRUE(read_kv(rd).ok());
  EXPECT_EQ(c_out[0], 0.5f);
  EXPECT_EQ(c_out[2], 224.f);
  EXPECT_EQ(c_out[3], -224.f);
  EXPECT_TRUE(std::isnan(c_out[4]));
  EXPECT_EQ(r_out[0], 1.5f);
  EXPECT_EQ(r_out[63], std::ldexp(1.f, -10));
  EXPECT_EQ(c_out[100], 0.f);
}

// Random values with a scale that is not a power of two: every value read
// back is within half an e4m3 step (relative 2^-4, or 2^-10 s in the
// subnormal range) of v, and is exactly what the reference quantiser gives.
TEST(KvCache, Fp8E4m3RoundTripWithinHalfAStep) {
  const float s = 0.0173f;
  Pool cache(KvFormat::fp8_e4m3, 2, 3);
  cache.c.scale = s;
  std::vector<float> c = random_normal(512, 5), r = random_normal(64, 6, 2.f);
  for (int64_t slot : {0, 4}) cache.append_one(c, r, slot);
  for (int64_t slot : {0, 4}) {
    std::vector<float> c_out(512), r_out(64);
    ReadKvArgs rd{cache.view, TensorView::make(&slot, DType::i64, {1}),
                  TensorView::make(c_out.data(), DType::f32, {1, 512}),
                  TensorView::make(r_out.data(), DType::f32, {1, 64})};
    ASSERT_TRUE(read_kv(rd).ok());
    for (int i = 0; i < 576; ++i) {
      const float v = i < 512 ? c[i] : r[i - 512], got = i < 512 ? c_out[i] : r_out[i - 512];
      const float want = float(double(e4m3_to_float(reference::quantize_e4m3(v, s))) * s);
      EXPECT_EQ(got, want) << "value " << i;
      const float bound = std::max(std::fabs(v) / 16.f, std::ldexp(s, -10)) * 1.0001f;
      EXPECT_LE(std::fabs(got - v), bound) << "value " << i << " v " << v;
    }
  }
  // Slots 1-3 and 5 untouched.
  for (int64_t slot : {1, 2, 3, 5})
    for (int i = 0; i < 576; ++i) ASSERT_EQ(cache.bytes()[slot * 576 + i], kPoison);
}

TEST(KvCacheValidation, Fp8E4m3Scale) {
  Pool cache(KvFormat::fp8_e4m3, 1, 4);
  EXPECT_TRUE(validate_kv_cache(cache.view, "kv").ok());
  KvCacheView v = cache.view;
  v.scale = TensorView{};
  expect_error(validate_kv_cache(v, "kv"), Errc::invalid_value, "kv.scale");
  float two[2] = {1.f, 1.f};
  v.scale = TensorView::make(two, DType::f32, {2});
  expect_error(validate_kv_cache(v, "kv"), Errc::invalid_shape, "kv.scale");
  float bad = -1.f;
  v.scale = TensorView::make(&bad, DType::f32, {1});
  expect_error(validate_kv_cache(v, "kv"), Errc::invalid_value, "kv.scale = -1");
  bad = NAN;
  expect_error(validate_kv_cache(v, "kv"), Errc::invalid_value, "kv.scale");
  int32_t i32 = 1;
  v.scale = TensorView::make(&i32, DType::i32, {1});
  expect_error(validate_kv_cache(v, "kv"), Errc::invalid_dtype, "kv.scale");
  // A scale on another format's cache is a mistake, named.
  Pool ds(KvFormat::fp8_ds_mla, 1, 4);
  KvCacheView w = ds.view;
  w.scale = cache.view.scale;
  expect_error(validate_kv_cache(w, "kv"), Errc::invalid_value, "kv.scale");
  // Entry width: 656-byte entries are not fp8_e4m3.
  w.format = KvFormat::fp8_e4m3;
  expect_error(validate_kv_cache(w, "kv"), Errc::invalid_shape, "576");
}

TEST(KvCache, Bf16EntryBytes) {
  std::vector<float> c(512, 0.f), r(64, 0.f);
  c[0] = 1.0f;                             // 0x3f80
  c[511] = -2.f;                           // 0xc000
  r[63] = 1.0f + 3 * std::ldexp(1.f, -8);  // 0x3f82
  Pool cache(KvFormat::bf16, 1, 1);
  cache.append_one(c, r, 0);
  EXPECT_EQ(cache.bytes()[0], 0x80);
  EXPECT_EQ(cache.bytes()[1], 0x3f);
  EXPECT_EQ(cache.bytes()[1022], 0x00);
  EXPECT_EQ(cache.bytes()[1023], 0xc0);
  EXPECT_EQ(cache.bytes()[1150], 0x82);
  EXPECT_EQ(cache.bytes()[1151], 0x3f);
  EXPECT_EQ(cache.bytes()[2], 0x00);
}

// Every scale is the smallest power of two that keeps amax/s <= 448, floored at
// 1e-4: so amax/s lies in (224, 448], or s is the floor 2^-13 (1e-4 rounded up).
TEST(KvCache, Fp8ScaleIsTheSmallestSufficientPowerOfTwo) {
  for (float amax : {0.f, 1e-7f, 0.0447f, 0.0448f, 0.04481f, 1.f, 3.f, 448.f, 449.f, 1e6f}) {
    const float s = reference::fp8_ds_mla_scale(amax);
    int e;
    EXPECT_EQ(std::frexp(s, &e), 0.5f) << "not a power of two: " << s;
    EXPECT_LE(amax / s, 448.f) << amax;
    if (s > std::ldexp(1.f, -13))
      EXPECT_GT(amax / s, 224.f) << amax;
    else
      EXPECT_LE(amax / 448.f, std::ldexp(1.f, -13)) << amax;  // the 1e-4 floor rounds up to 2^-13
  }
  EXPECT_EQ(reference::fp8_ds_mla_scale(448.f * 0.25f),
            0.25f);  // exact power of two maps to itself
}

struct RoundTripCase {
  KvFormat format;
  int64_t page_size;
  int64_t page_pad;  // padding between pages, in elements of the cache dtype
  DType in_dtype;
};
void PrintTo(const RoundTripCase& c, std::ostream* os) {
  *os << kv_format_name(c.format) << " page" << c.page_size << " pad" << c.page_pad << " "
      << dtype_name(c.in_dtype);
}

class KvRoundTrip : public ::testing::TestWithParam<RoundTripCase> {};

// Random tokens (several magnitudes per group, so scales vary) written to
// scattered slots, with -1 padding tokens, then read back.
TEST_P(KvRoundTrip, ErrorIsBoundedAndOnlyListedSlotsAreWritten) {
  const auto p = GetParam();
  const int64_t num_pages = 5;
  Pool cache(p.format, num_pages, p.page_size, p.page_pad);
  const int64_t cap = cache.capacity();
  const int64_t T = std::min<int64_t>(cap, 37);
  auto c = random_normal(T * 512, 11);
  auto r = random_normal(T * 64, 12);
  for (int64_t t = 0; t < T; ++t)  // per-token magnitudes from 2^-12 to 2^8
    for (int i = 0; i < 512; ++i)
      c[t * 512 + i] *= std::ldexp(1.f, int((t * 7 + i / 128) % 21) - 12);
  // Slots: a permutation of the capacity, every 5th token padding (-1).
  std::vector<int64_t> perm(cap);
  for (int64_t i = 0; i < cap; ++i) perm[i] = i;
  std::shuffle(perm.begin(), perm.end(), std::mt19937(3));
  std::vector<int64_t> slots(T);
  for (int64_t t = 0; t < T; ++t) slots[t] = t % 5 == 4 ? -1 : perm[t];

  // Inputs as f32 or bf16; the bound is against the value the input holds.
  std::vector<bf16> cb(c.size()), rb(r.size());
  if (p.in_dtype == DType::bf16) {
    for (size_t i = 0; i < c.size(); ++i) c[i] = round_to_bf16(c[i]), cb[i] = float_to_bf16(c[i]);
    for (size_t i = 0; i < r.size(); ++i) r[i] = round_to_bf16(r[i]), rb[i] = float_to_bf16(r[i]);
  }
  void* cp = p.in_dtype == DType::bf16 ? static_cast<void*>(cb.data()) : c.data();
  void* rp = p.in_dtype == DType::bf16 ? static_cast<void*>(rb.data()) : r.data();
  AppendKvArgs a{TensorView::make(cp, p.in_dtype, {T, 512}),
                 TensorView::make(rp, p.in_dtype, {T, 64}),
                 TensorView::make(slots.data(), DType::i64, {T}), cache.view};
  ASSERT_TRUE(append_kv(a).ok()) << append_kv(a).to_string();

  // Slots not listed (and the page padding) keep the poison.
  std::vector<bool> written(cap, false);
  for (int64_t s : slots)
    if (s >= 0) written[s] = true;
  const int64_t eb = kv_entry_bytes(p.format);
  for (int64_t s = 0; s < cap; ++s) {
    if (written[s]) continue;
    const uint8_t* e = reference::kv_entry_ptr(cache.view, s);
    for (int64_t b = 0; b < eb; ++b) ASSERT_EQ(e[b], kPoison) << "slot " << s;
  }

  std::vector<int64_t> live;
  std::vector<int64_t> live_t;
  for (int64_t t = 0; t < T; ++t)
    if (slots[t] >= 0) live.push_back(slots[t]), live_t.push_back(t);
  const int64_t L = live.size();
  std::vector<float> c_out(L * 512, NAN), r_out(L * 64, NAN);
  ReadKvArgs rd{cache.view, TensorView::make(live.data(), DType::i64, {L}),
                TensorView::make(c_out.data(), DType::f32, {L, 512}),
                TensorView::make(r_out.data(), DType::f32, {L, 64})};
  ASSERT_TRUE(read_kv(rd).ok());
  for (int64_t j = 0; j < L; ++j) {
    const int64_t t = live_t[j];
    for (int g = 0; g < 4; ++g) {
      float amax = 0.f;
      for (int i = 0; i < 128; ++i) amax = std::max(amax, std::fabs(c[t * 512 + g * 128 + i]));
      const double s = reference::fp8_ds_mla_scale(amax);
      for (int i = g * 128; i < g * 128 + 128; ++i) {
        const double x = c[t * 512 + i], y = c_out[j * 512 + i];
        // bf16: 8 significant bits, RNE -> |err| <= half a step = 2^-8 |x|.
        // fp8: e4m3 keeps 4 significant bits of x/s, RNE -> |err| <= 2^-4 |x| in the
        // normal range; below 2^-6 (subnormal) the step is 2^-9, so |err| <= 2^-10 s.
        const double bound = p.format == KvFormat::bf16
                                 ? std::ldexp(std::fabs(x), -8)
                                 : std::ldexp(std::fabs(x), -4) + std::ldexp(s, -10);
        ASSERT_LE(std::fabs(x - y), bound) << "token " << t << " value " << i;
      }
    }
    for (int i = 0; i < 64; ++i) {  // rope is bf16 in both formats: 2^-8 |x|
      const double x = r[t * 64 + i], y = r_out[j * 64 + i];
      ASSERT_LE(std::fabs(x - y), std::ldexp(std::fabs(x), -8)) << "token " << t << " rope " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, KvRoundTrip,
                         ::testing::Values(RoundTripCase{KvFormat::fp8_ds_mla, 1, 0, DType::f32},
                                           RoundTripCase{KvFormat::fp8_ds_mla, 16, 16, DType::bf16},
                                           RoundTripCase{KvFormat::fp8_ds_mla, 64, 3, DType::f32},
                                           RoundTripCase{KvFormat::fp8_ds_mla, 7, 0, DType::f32},
                                           RoundTripCase{KvFormat::bf16, 1, 8, DType::f32},
                                           RoundTripCase{KvFormat::bf16, 32, 0, DType::bf16},
                                           RoundTripCase{KvFormat::bf16, 128, 1, DType::f32}),
                         ::mla::testing::PrintedName{});

// ---- validation ----------------------------------------------------------------

struct AppendFixture {
  std::vector<float> c = random_normal(3 * 512, 1), r = random_normal(3 * 64, 2);
  std::vector<int64_t> slots{0, -1, 5};
  Pool cache{KvFormat::fp8_ds_mla, 2, 4};
  AppendKvArgs args() {
    return {TensorView::make(c.data(), DType::f32, {3, 512}),
            TensorView::make(r.data(), DType::f32, {3, 64}),
            TensorView::make(slots.data(), DType::i64, {3}), cache.view};
  }
};

TEST(KvCacheValidation, SlotPastCapacityIsNamed) {
  AppendFixture f;
  ASSERT_TRUE(append_kv(f.args()).ok());
  f.slots[2] = 8;  // capacity 2 pages * 4
  expect_error(append_kv(f.args()), Errc::out_of_range, "slots[2] = 8");
  f.slots[2] = -3;
  expect_error(append_kv(f.args()), Errc::out_of_range, "slots[2] = -3");
}

TEST(KvCacheValidation, ReadRejectsSkipSlot) {
  AppendFixture f;
  std::vector<float> c(3 * 512), r(3 * 64);
  ReadKvArgs rd{f.cache.view, TensorView::make(f.slots.data(), DType::i64, {3}),
                TensorView::make(c.data(), DType::f32, {3, 512}),
                TensorView::make(r.data(), DType::f32, {3, 64})};
  expect_error(read_kv(rd), Errc::out_of_range, "slots[1] = -1");
  rd.c_kv.dtype = DType::bf16;
  expect_error(read_kv(rd), Errc::invalid_dtype, "c_kv");
}

TEST(KvCacheValidation, ShapesDtypesStridesDevices) {
  using Row = testing::BadRow<AppendKvArgs>;
  AppendFixture f;
  const std::vector<Row> rows = {
      Row(Errc::invalid_shape, {"c_kv"}, [](auto& a) { a.c_kv.shape[1] = 576; }),
      // T mismatch with slots
      Row(Errc::invalid_shape, {"k_rope"}, [](auto& a) { a.k_rope.shape[0] = 2; }),
      Row(Errc::invalid_dtype, {"slots: dtype i32"}, [](auto& a) { a.slots.dtype = DType::i32; }),
      // fp8 format over a bf16 tensor
      Row(Errc::invalid_dtype, {"cache.data"}, [](auto& a) { a.cache.data.dtype = DType::bf16; }),
      // 656-wide tensor labelled bf16
      Row(Errc::invalid_shape, {"expected 576"}, [](auto& a) { a.cache.format = KvFormat::bf16; }),
      // pages overlap
      Row(Errc::invalid_stride, {"page stride 1968"},
          [](auto& a) { a.cache.data.strides[0] = 3 * 656; }),
      // token dim not dense
      Row(Errc::invalid_stride, {"cache.data"}, [](auto& a) { a.cache.data.strides[1] = 700; }),
      Row(Errc::invalid_shape, {"page_size = 0"}, [](auto& a) { a.cache.data.shape[1] = 0; }),
      Row(Errc::invalid_device, {"c_kv"}, [](auto& a) { a.c_kv.device = Device::cuda(); }),
  };
  testing::expect_errors(
      f.args(), [](const AppendKvArgs& a) { return append_kv(a); }, rows);
}

}  // namespace
}  // namespace mla
