// The self check (mla/self_check.hpp, mla_self_check): its verdict agrees with what the
// capability probe says this machine is (77 "no CUDA GPU" on CI, 0 on a Hopper GPU), its
// report is the lines it streamed, and the C ABI returns the same result as JSON.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mla/c_api.h"
#include "mla/self_check.hpp"
#include "mla/support.hpp"

namespace {

// What the self check must answer here, from the capability probe.
int expected_status() {
  const mla::Support s = mla::is_supported(mla::OpFamily::decode, 0);
  if (s.supported) return mla::kSelfCheckPassed;
  if (mla_built_with_cuda() == 0 || s.reason.rfind("no CUDA GPU", 0) == 0 ||
      s.reason.rfind("no usable CUDA GPU", 0) == 0)
    return mla::kSelfCheckNoGpu;
  return mla::kSelfCheckFailed;  // a GPU the sm_90a kernels cannot run on
}

TEST(SelfCheck, VerdictMatchesThisMachineAndReportIsTheStreamedLines) {
  std::vector<std::string> lines;
  const mla::SelfCheckResult r =
      mla::self_check(5, [&](const std::string& l) { lines.push_back(l); });
  EXPECT_EQ(r.status, expected_status()) << r.text();
  std::string streamed;
  for (const std::string& l : lines) streamed += l + "\n";
  EXPECT_EQ(streamed, r.text());
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.front(), r.header);
  if (r.status == mla::kSelfCheckNoGpu) {
    EXPECT_NE(r.header.find("CUDA GPU"), std::string::npos) << r.header;
    EXPECT_EQ(r.header.find("driver version is insufficient"), std::string::npos) << r.header;
    EXPECT_TRUE(r.checks.empty());
    EXPECT_TRUE(r.summary.empty());
  } else if (r.status == mla::kSelfCheckPassed) {
    ASSERT_EQ(r.checks.size(), 6u);
    for (const mla::SelfCheckItem& c : r.checks) EXPECT_TRUE(c.ok) << c.line();
    EXPECT_NE(r.summary.find("all 6 checks passed"), std::string::npos) << r.summary;
  }
}

TEST(SelfCheck, ItemLine) {
  mla::SelfCheckItem c{"top-k", "", false, "indices: entry 3 is 7"};
  EXPECT_EQ(c.line(), "  FAIL top-k                      indices: entry 3 is 7");
  c = {"prefill attention", "2 sequences", true, "out within 1e-3"};
  EXPECT_EQ(c.line(), "  ok   prefill attention          2 sequences: out within 1e-3");
}

TEST(SelfCheck, CAbiTwin) {
  int32_t result = -1;
  size_t len = 0;
  EXPECT_EQ(mla_self_check(1, nullptr, nullptr, 0, &len), MLA_ERR_INVALID_VALUE);
  EXPECT_NE(std::string(mla_last_error_message()).find("result"), std::string::npos);
  EXPECT_EQ(mla_self_check(1, &result, nullptr, 0, nullptr), MLA_ERR_INVALID_VALUE);
  EXPECT_NE(std::string(mla_last_error_message()).find("length"), std::string::npos);
  EXPECT_EQ(mla_self_check(1, &result, nullptr, 16, &len), MLA_ERR_INVALID_VALUE);
  EXPECT_EQ(result, -1);  // a bad argument runs nothing

  ASSERT_EQ(mla_self_check(1, &result, nullptr, 0, &len), MLA_OK);
  EXPECT_EQ(result, expected_status());
  ASSERT_GT(len, 0u);
  std::string buf(len + 1, '\x7f');
  size_t len2 = 0;
  ASSERT_EQ(mla_self_check(1, &result, buf.data(), buf.size(), &len2), MLA_OK);
  EXPECT_EQ(len2, len);
  buf.resize(len);
  const nlohmann::json j = nlohmann::json::parse(buf);
  const mla::SelfCheckResult r = mla::self_check(1);
  EXPECT_EQ(j["status"].get<int>(), result);
  EXPECT_EQ(j["header"].get<std::string>(), r.header);
  EXPECT_EQ(j["summary"].get<std::string>(), r.summary);
  ASSERT_EQ(j["checks"].size(), r.checks.size());
  for (size_t i = 0; i < r.checks.size(); ++i) {
    EXPECT_EQ(j["checks"][i]["name"].get<std::string>(), r.checks[i].name);
    EXPECT_EQ(j["checks"][i]["ok"].get<bool>(), r.checks[i].ok);
    EXPECT_EQ(j["checks"][i]["line"].get<std::string>(), r.checks[i].line());
  }
  // The details carry measured errors, equal run to run (the same seed, deterministic kernels).
  EXPECT_EQ(j["text"].get<std::string>(), r.text());
}

}  // namespace
