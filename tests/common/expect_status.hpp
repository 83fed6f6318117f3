// GoogleTest check of a failed call: the Status has the expected Errc and its
// message holds every given fragment (the standards want messages that name
// the argument and the bad value, so tests check both).
#pragma once
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "mla/status.hpp"

namespace mla::testing {

inline void expect_error(const Status& st, Errc code,
                         std::initializer_list<const char*> fragments) {
  ASSERT_FALSE(st.ok()) << "expected " << errc_name(code);
  EXPECT_EQ(st.code(), code) << st.to_string();
  for (const char* f : fragments)
    EXPECT_NE(st.message().find(f), std::string::npos)
        << "message \"" << st.message() << "\" lacks \"" << f << "\"";
}
inline void expect_error(const Status& st, Errc code, const std::string& fragment) {
  expect_error(st, code, {fragment.c_str()});
}

}  // namespace mla::testing
