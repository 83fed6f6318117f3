// The capability probe: the CPU reference always answers yes; a CUDA device is a
// yes only with the kernels built and a compute capability 9.0 device present,
// and every no says why in words (never "CUDA driver version is insufficient").
#include <gtest/gtest.h>

#include <string>

#include "mla/c_api.h"
#include "mla/support.hpp"

namespace {

TEST(Support, CpuRunsEveryFamily) {
  for (int f = 0; f < mla::kNumOpFamilies; ++f) {
    const mla::Support s = mla::is_supported(mla::OpFamily(f), -1);
    EXPECT_TRUE(s.supported) << mla::op_family_name(mla::OpFamily(f));
    EXPECT_TRUE(s.reason.empty());
  }
}

TEST(Support, CudaAnswerIsConsistentAcrossFamiliesAndExplainsNo) {
  const mla::Support first = mla::is_supported(mla::OpFamily::decode, 0);
  for (int f = 0; f < mla::kNumOpFamilies; ++f) {
    const mla::Support s = mla::is_supported(mla::OpFamily(f), 0);
    EXPECT_EQ(s.supported, first.supported);
    EXPECT_EQ(s.reason, first.reason);
  }
  if (!first.supported) {
    EXPECT_FALSE(first.reason.empty());
    EXPECT_EQ(first.reason.find("driver version is insufficient"), std::string::npos)
        << first.reason;
  }
  const mla::Support far = mla::is_supported(mla::OpFamily::topk, 1000);
  EXPECT_FALSE(far.supported);
}

TEST(Support, CAbiTwin) {
  int32_t ok = -1;
  size_t len = 0;
  ASSERT_EQ(mla_is_supported(MLA_FAMILY_DECODE, -1, &ok, nullptr, 0, &len), MLA_OK);
  EXPECT_EQ(ok, 1);
  EXPECT_EQ(len, 0u);
  char buf[256];
  ASSERT_EQ(mla_is_supported(MLA_FAMILY_SPARSE_DECODE, 1000, &ok, buf, sizeof buf, &len), MLA_OK);
  EXPECT_EQ(ok, 0);
  EXPECT_GT(len, 0u);
  EXPECT_EQ(std::string(buf).size(), len < sizeof buf ? len : sizeof buf - 1);
  EXPECT_EQ(mla_is_supported(MLA_NUM_FAMILIES, -1, &ok, nullptr, 0, &len), MLA_ERR_INVALID_VALUE);
  EXPECT_NE(std::string(mla_last_error_message()).find("family = 7"), std::string::npos);
  EXPECT_EQ(mla_is_supported(0, -1, nullptr, nullptr, 0, &len), MLA_ERR_INVALID_VALUE);
  EXPECT_STREQ(mla_family_name(MLA_FAMILY_KV_CACHE), "kv_cache");
  EXPECT_EQ(mla_family_name(-1), nullptr);
}

}  // namespace
