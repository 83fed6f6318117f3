// GoogleTest check of a failed call: the Status has the expected Errc and its
// message holds every given fragment (the standards want messages that name
// the argument and the bad value, so tests check both).
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "mla/status.hpp"

namespace mla::testing {

inline void expect_error(const Status& st, Errc code, const std::vector<std::string>& fragments) {
  ASSERT_FALSE(st.ok()) << "expected " << errc_name(code);
  EXPECT_EQ(st.code(), code) << st.to_string();
  for (const std::string& f : fragments)
    EXPECT_NE(st.message().find(f), std::string::npos)
        << "message \"" << st.message() << "\" lacks \"" << f << "\"";
}
inline void expect_error(const Status& st, Errc code,
                         std::initializer_list<const char*> fragments) {
  expect_error(st, code, std::vector<std::string>(fragments.begin(), fragments.end()));
}
inline void expect_error(const Status& st, Errc code, const std::string& fragment) {
  expect_error(st, code, {fragment.c_str()});
}

// One row of a bad-input table: the error (code and message fragments; the first
// names the argument) a call must give after `change` breaks one thing in a valid set
// of arguments.
template <class Args>
struct BadRow {
  Errc code;
  std::vector<std::string> fragments;
  std::function<void(Args&)> change;
  BadRow(Errc c, std::vector<std::string> f, std::function<void(Args&)> ch)
      : code(c), fragments(std::move(f)), change(std::move(ch)) {}
};

// Each row's change applied to a fresh copy of `valid`, then `call(args)`: that row's error.
template <class Args, class Call>
void expect_errors(const Args& valid, Call&& call, const std::vector<BadRow<Args>>& rows) {
  for (size_t i = 0; i < rows.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "row " << i << " (" << rows[i].fragments.front() << ")");
    Args a = valid;
    rows[i].change(a);
    expect_error(call(a), rows[i].code, rows[i].fragments);
  }
}

}  // namespace mla::testing
