// RoPE with DeepSeek-V3's YaRN frequencies, against formulas written out
// independently here (complex multiplication, hand-derived correction range),
// and the V3.2 softmax scale.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <string>
#include <vector>

#include "common/expect_status.hpp"
#include "common/random.hpp"
#include "mla/dims.hpp"
#include "mla/rope.hpp"

namespace mla {
namespace {

using testing::expect_error;
using Row = testing::BadRow<ApplyRopeArgs>;

using testing::HostTensor;
using testing::Rng;

// DeepSeek-V3 (dim 64, theta 1e4, original context 4096): the dims where a
// frequency turns beta times over 4096 tokens are
//   d(32) = 64 ln(4096 / (64 pi)) / (2 ln 1e4) = 10.47 -> floor 10,
//   d(1)  = 64 ln(4096 / (2 pi))  / (2 ln 1e4) = 22.51 -> ceil 23,
// so pairs 0..10 keep theta^(-j/32), pairs 23..31 are divided by 40, and the
// ones between blend linearly with weight (j - 10) / 13 on the divided one.
double v3_inv_freq(int j) {
  const double base = std::pow(10000.0, -j / 32.0);
  const double w = std::clamp((j - 10) / 13.0, 0.0, 1.0);
  return (1 - w) * base + w * base / 40.0;
}

TEST(Rope, YarnInvFreqDeepSeekV3) {
  HostTensor f(DType::f64, {32});
  Status st = rope_inv_freq(deepseek_v3_rope(), f.view());
  ASSERT_TRUE(st.ok()) << st.to_string();
  for (int j = 0; j < 32; ++j) EXPECT_NEAR(f.get(j), v3_inv_freq(j), 1e-15 * v3_inv_freq(j)) << j;
  EXPECT_EQ(f.get(0), 1.0);
  EXPECT_NEAR(f.get(31), std::pow(1e4, -31 / 32.0) / 40, 1e-20);
  // factor 1: plain RoPE frequencies.
  RopeConfig plain = deepseek_v3_rope();
  plain.factor = 1.0;
  ASSERT_TRUE(rope_inv_freq(plain, f.view()).ok());
  for (int j = 0; j < 32; ++j) EXPECT_NEAR(f.get(j), std::pow(1e4, -j / 32.0), 1e-16) << j;
  EXPECT_EQ(rope_attention_factor(deepseek_v3_rope()), 1.0);
}

TEST(Rope, SoftmaxScaleDeepSeekV32) {
  // (0.1 ln 40 + 1)^2 / sqrt(192), and not 576^-0.5 = 0.041667.
  EXPECT_NEAR(deepseek_v32_softmax_scale(), 0.135234, 5e-7);
  EXPECT_NEAR(yarn_mscale(40.0), 1.3688879, 1e-7);
  EXPECT_EQ(yarn_mscale(1.0), 1.0);
}

// Naive rotation: each pair as a complex number times e^{i pos f_j}.
std::vector<double> naive_rope(const std::vector<double>& x, int64_t pos, RopeLayout layout) {
  std::vector<double> y(64);
  for (int j = 0; j < 32; ++j) {
    const int a = layout == RopeLayout::interleaved ? 2 * j : j;
    const int b = layout == RopeLayout::interleaved ? 2 * j + 1 : j + 32;
    const std::complex<double> z =
        std::complex<double>(x[a], x[b]) * std::polar(1.0, double(pos) * v3_inv_freq(j));
    y[a] = z.real();
    y[b] = z.imag();
  }
  return y;
}

struct RopeCase {
  HostTensor x, pos;
  int64_t T = 5, H = 3;
};
RopeCase make_case(Rng& rng, DType dt) {
  RopeCase c;
  c.x = testing::random_tensor(rng, dt, {c.T, c.H, 64});
  c.pos = HostTensor(DType::i64, {c.T});
  const int64_t positions[] = {0, 1, 4095, 4096, 163839};  // 160K: V3.2's longest context
  for (int64_t t = 0; t < c.T; ++t) c.pos.set(t, positions[t]);
  return c;
}

TEST(Rope, MatchesComplexRotationBothLayouts) {
  Rng rng(8);
  for (RopeLayout layout : {RopeLayout::interleaved, RopeLayout::half_split}) {
    for (DType dt : {DType::f64, DType::f32}) {
      RopeCase c = make_case(rng, dt);
      HostTensor out(dt, {c.T, c.H, 64});
      out.poison();
      Status st = apply_rope({c.x.view(), c.pos.view(), out.view(), deepseek_v3_rope(), layout});
      ASSERT_TRUE(st.ok()) << st.to_string();
      for (int64_t t = 0; t < c.T; ++t)
        for (int64_t h = 0; h < c.H; ++h) {
          std::vector<double> x(64);
          for (int d = 0; d < 64; ++d) x[d] = c.x.get((t * c.H + h) * 64 + d);
          const std::vector<double> want = naive_rope(x, int64_t(c.pos.get(t)), layout);
          for (int d = 0; d < 64; ++d) {
            // Angles reach 1.6e5 rad: cos/sin of the same double angle agree,
            // but the angle itself (pos * f) carries ~1 ulp of 1.6e5 = 3e-11;
            // f32 outputs add one rounding (2^-24 relative of |x| <= 1.5).
            const double tol = dt == DType::f64 ? 1e-10 : 1e-7;
            EXPECT_NEAR(out.get((t * c.H + h) * 64 + d), want[d], tol)
                << "layout " << int(layout) << " t " << t << " h " << h << " d " << d;
          }
        }
    }
  }
}

// The two layouts are the same rotation on permuted dims: half_split of x ==
// unpermute(interleaved(permute(x))), with permute taking (i, i+32) to (2i, 2i+1).
TEST(Rope, HalfSplitIsInterleavedOnPermutedDims) {
  Rng rng(9);
  RopeCase c = make_case(rng, DType::f64);
  HostTensor perm(DType::f64, {c.T, c.H, 64}), a(DType::f64, {c.T, c.H, 64}),
      b(DType::f64, {c.T, c.H, 64});
  for (int64_t r = 0; r < c.T * c.H; ++r)
    for (int i = 0; i < 32; ++i) {
      perm.set(r * 64 + 2 * i, c.x.get(r * 64 + i));
      perm.set(r * 64 + 2 * i + 1, c.x.get(r * 64 + i + 32));
    }
  ASSERT_TRUE(
      apply_rope({c.x.view(), c.pos.view(), a.view(), deepseek_v3_rope(), RopeLayout::half_split})
          .ok());
  ASSERT_TRUE(
      apply_rope({perm.view(), c.pos.view(), b.view(), deepseek_v3_rope(), RopeLayout::interleaved})
          .ok());
  for (int64_t r = 0; r < c.T * c.H; ++r)
    for (int i = 0; i < 32; ++i) {
      EXPECT_EQ(a.get(r * 64 + i), b.get(r * 64 + 2 * i));
      EXPECT_EQ(a.get(r * 64 + i + 32), b.get(r * 64 + 2 * i + 1));
    }
}

TEST(Rope, InPlaceEqualsOutOfPlaceAndPositionZeroIsIdentity) {
  Rng rng(10);
  RopeCase c = make_case(rng, DType::f32);
  HostTensor out(DType::f32, {c.T, c.H, 64});
  ASSERT_TRUE(apply_rope({c.x.view(), c.pos.view(), out.view(), deepseek_v3_rope()}).ok());
  HostTensor x0 = c.x;
  ASSERT_TRUE(apply_rope({c.x.view(), c.pos.view(), c.x.view(), deepseek_v3_rope()}).ok());
  for (int64_t i = 0; i < out.numel(); ++i) ASSERT_EQ(c.x.get(i), out.get(i)) << i;
  for (int64_t i = 0; i < c.H * 64; ++i) EXPECT_EQ(out.get(i), x0.get(i)) << "position 0";
}

TEST(Rope, Validation) {
  Rng rng(11);
  RopeCase c = make_case(rng, DType::f32);
  HostTensor out(DType::f32, {c.T, c.H, 64});
  ApplyRopeArgs good{c.x.view(), c.pos.view(), out.view(), deepseek_v3_rope()};
  ASSERT_TRUE(apply_rope(good).ok());
  const std::vector<Row> rows = {
      Row(Errc::invalid_value, {"config.dim = 63"}, [](auto& a) { a.config.dim = 63; }),
      Row(Errc::invalid_shape, {"x", "64", "32"}, [](auto& a) { a.config.dim = 32; }),
      Row(Errc::invalid_value, {"beta_fast = 0.5"}, [](auto& a) { a.config.beta_fast = 0.5; }),
      Row(Errc::invalid_value, {"theta = nan"}, [](auto& a) { a.config.theta = NAN; }),
      Row(Errc::invalid_dtype, {"x", "bf16"}, [](auto& a) { a.x.dtype = DType::bf16; }),
      Row(Errc::invalid_dtype, {"positions", "f32"},
          [](auto& a) { a.positions.dtype = DType::f32; }),
      Row(Errc::invalid_shape, {"out", "[5, 4, 64]"}, [](auto& a) { a.out.shape[1] = 4; }),
      Row(Errc::invalid_device, {"positions"},
          [](auto& a) { a.positions.device = Device::cuda(0); }),
      Row(Errc::unsupported, {"apply_rope"},
          [](auto& a) { a.x.device = a.out.device = a.positions.device = Device::cuda(0); }),
  };
  testing::expect_errors(
      good, [](const ApplyRopeArgs& a) { return apply_rope(a); }, rows);
  c.pos.set(3, -7);
  expect_error(apply_rope(good), Errc::out_of_range, {"positions[3] = -7 is negative"});
  HostTensor f(DType::f32, {31});
  expect_error(rope_inv_freq(deepseek_v3_rope(), f.view()), Errc::invalid_shape,
               {"inv_freq", "[31]"});
}

}  // namespace
}  // namespace mla
