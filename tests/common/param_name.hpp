// Names parameterised test cases "case0", "case1", ... Without it GoogleTest
// names a struct parameter by its bytes, padding included, so the names change
// between test discovery and the run and ctest reports phantom failures.
#pragma once
#include <gtest/gtest.h>

#include <string>

namespace mla::testing {
struct IndexName {
  template <class P>
  std::string operator()(const ::testing::TestParamInfo<P>& info) const {
    return "case" + std::to_string(info.index);
  }
};
}  // namespace mla::testing
