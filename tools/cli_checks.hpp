// Validators shared by the subcommands' options.
#pragma once
#include <CLI/CLI.hpp>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>

namespace mla::cli {

// A decimal integer in [lo, hi], checked on the text before CLI11 converts it: CLI11's
// conversion saturates 64-bit values (99999999999999999999 became INT64_MAX) and reads
// "010" as octal. The message names the value as given.
inline CLI::Validator decimal_integer(int64_t lo = std::numeric_limits<int64_t>::min(),
                                      int64_t hi = std::numeric_limits<int64_t>::max()) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        int64_t v = 0;
        const char* b = s.data();
        const char* e = s.data() + s.size();
        if (b != e && *b == '+') ++b;
        auto [p, ec] = std::from_chars(b, e, v);
        if (ec == std::errc::result_out_of_range)
          return "'" + s + "' does not fit a 64-bit integer";
        if (ec != std::errc() || p != e || b == e ||
            (e - b > 1 && (*b == '0' || (*b == '-' && b[1] == '0'))))
          return "'" + s + "' is not a decimal integer";
        if (v < lo || v > hi)
          return "'" + s + "' is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) +
                 "]";
        return "";
      },
      "INT", "decimal_integer");
}

// A finite decimal number: "1e999" (which CLI11 turns into inf), "nan" and "inf" are refused
// with the text as given.
inline CLI::Validator finite_number() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        errno = 0;
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (s.empty() || end != s.c_str() + s.size()) return "'" + s + "' is not a number";
        if (errno == ERANGE && std::fabs(v) > 1) return "'" + s + "' does not fit a double";
        if (!std::isfinite(v)) return "'" + s + "' is not a finite number";
        return "";
      },
      "NUMBER", "finite_number");
}

}  // namespace mla::cli
