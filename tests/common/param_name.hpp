// Names of parameterised test cases.
//
// IndexName: "case0", "case1", ... Without a name generator GoogleTest names a struct
// parameter by its bytes, padding included, so the names change between test discovery
// and the run and ctest reports phantom failures.
//
// PrintedName: the case as its PrintTo prints it (what GoogleTest also shows as
// GetParam() and in failures, instead of a byte dump), reduced to letters, digits and
// '_', with the index appended so that names stay unique: "bf16_page64_L0_1_70_s_q1_h16_0".
// Only for parameter types with a PrintTo(const T&, std::ostream*) next to them; join()
// prints a list of lengths.
#pragma once
#include <gtest/gtest.h>

#include <cctype>
#include <ostream>
#include <string>
#include <vector>

namespace mla::testing {
struct IndexName {
  template <class P>
  std::string operator()(const ::testing::TestParamInfo<P>& info) const {
    return "case" + std::to_string(info.index);
  }
};

struct PrintedName {
  template <class P>
  std::string operator()(const ::testing::TestParamInfo<P>& info) const {
    std::string out;
    for (char c : ::testing::PrintToString(info.param)) {
      const bool word = std::isalnum(static_cast<unsigned char>(c));
      if (word)
        out += c;
      else if (!out.empty() && out.back() != '_')
        out += '_';
    }
    if (!out.empty() && out.back() != '_') out += '_';
    return out + std::to_string(info.index);
  }
};

template <class T>
std::string join(const std::vector<T>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}
}  // namespace mla::testing
