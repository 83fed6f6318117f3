#include "common/checked.hpp"

#include <fmt/format.h>

#include <string>

namespace mla::detail {
namespace {

std::string join(std::initializer_list<int64_t> v, const char* op) {
  std::string s;
  for (int64_t x : v) s += (s.empty() ? "" : op) + std::to_string(x);
  return s;
}

Status overflow(std::string_view what, std::initializer_list<int64_t> v, const char* op) {
  return Status(Errc::invalid_value,
                fmt::format("{}: {} overflows 64-bit arithmetic", what, join(v, op)));
}

}  // namespace

Status checked_product(std::initializer_list<int64_t> factors, std::string_view what,
                       int64_t* out) {
  int64_t p = 1;
  for (int64_t f : factors)
    if (!mul_ok(p, f, &p)) return overflow(what, factors, " * ");
  *out = p;
  return Status::Ok();
}

Status checked_sum(std::initializer_list<int64_t> terms, std::string_view what, int64_t* out) {
  int64_t s = 0;
  for (int64_t t : terms)
    if (!add_ok(s, t, &s)) return overflow(what, terms, " + ");
  *out = s;
  return Status::Ok();
}

Status checked_round_up(int64_t n, int64_t to, std::string_view what, int64_t* out) {
  int64_t up = 0;
  if (to <= 0 || !add_ok(n, to - 1, &up))
    return Status(Errc::invalid_value,
                  fmt::format("{}: {} rounded up to a multiple of {} overflows 64-bit arithmetic",
                              what, n, to));
  *out = up / to * to;
  return Status::Ok();
}

Status checked_int32(int64_t v, std::string_view what, int32_t* out) {
  if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
    return Status(Errc::invalid_value,
                  fmt::format("{} = {} does not fit the 32-bit index type", what, v));
  *out = static_cast<int32_t>(v);
  return Status::Ok();
}

Status ByteLayout::add(std::initializer_list<int64_t> factors, std::string_view what,
                       int64_t* offset) {
  int64_t bytes = 0, start = 0, end = 0;
  MLA_TRY(checked_product(factors, what, &bytes));
  MLA_TRY(checked_round_up(end_, align_, what, &start));
  MLA_TRY(checked_sum({start, bytes}, what, &end));
  *offset = start;
  end_ = end;
  return Status::Ok();
}

Status ByteLayout::add_bytes(int64_t bytes, std::string_view what, int64_t* offset) {
  int64_t start = 0, end = 0;
  MLA_TRY(checked_round_up(end_, align_, what, &start));
  MLA_TRY(checked_sum({start, bytes}, what, &end));
  *offset = start;
  end_ = end;
  return Status::Ok();
}

}  // namespace mla::detail
