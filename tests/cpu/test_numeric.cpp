#include <gtest/gtest.h>

#include <cmath>

#include "mla/numeric.hpp"
#include "mla/status.hpp"
#include "mla/tensor.hpp"

namespace mla {
namespace {

// e4m3fn: every one of the 254 finite codes must survive decode -> encode.
TEST(Numeric, E4m3RoundTripsEveryFiniteCode) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;  // NaN codes
    float f = e4m3_to_float(uint8_t(c));
    EXPECT_EQ(float_to_e4m3(f), uint8_t(c)) << "code " << c << " value " << f;
  }
}

TEST(Numeric, E4m3RoundsToNearestEvenAndSaturates) {
  EXPECT_EQ(e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(float_to_e4m3(1000.f), 0x7e);
  EXPECT_EQ(float_to_e4m3(-1000.f), 0xfe);
  // 1.0625 lies halfway between 1.0 (0x38) and 1.125 (0x39): ties to even -> 1.0.
  EXPECT_EQ(float_to_e4m3(1.0625f), 0x38);
  // 1.1875 halfway between 1.125 (0x39) and 1.25 (0x3a): ties to even -> 1.25.
  EXPECT_EQ(float_to_e4m3(1.1875f), 0x3a);
  // Smallest subnormal 2^-9; half of it rounds to (signed) zero.
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.f, -9)), 0x01);
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.f, -11)), 0x00);
  EXPECT_EQ(float_to_e4m3(-std::ldexp(1.f, -11)), 0x80);
}

TEST(Numeric, Bf16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f).bits, 0x3f80);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even -> 1.
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.f, -8)).bits, 0x3f80);
  EXPECT_EQ(float_to_bf16(1.0f + 3 * std::ldexp(1.f, -8)).bits, 0x3f82);
  EXPECT_EQ(bf16_to_float(bf16{0xc000}), -2.0f);
}

TEST(Tensor, MakeIsRowMajor) {
  float buf[24];
  auto t = TensorView::make(buf, DType::f32, {2, 3, 4});
  EXPECT_EQ(t.strides[0], 12);
  EXPECT_EQ(t.strides[2], 1);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_TRUE(t.is_contiguous());
}

}  // namespace
}  // namespace mla
