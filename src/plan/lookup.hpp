// Name lookup shared by the GPU and model tables: case-insensitive, and an unknown
// name gives an error that lists every known one (so a typo is one look away).
#pragma once
#include <fmt/format.h>

#include <cctype>
#include <span>
#include <string>
#include <string_view>

#include "mla/status.hpp"

namespace mla::plan::detail {

inline bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

template <class Spec>
Status find_by_name(std::span<const Spec> table, std::string_view name, const char* what,
                    const Spec** out) {
  std::string known;
  for (const Spec& s : table) {
    if (iequals(s.name, name)) {
      *out = &s;
      return Status::Ok();
    }
    known += known.empty() ? "" : ", ";
    known += s.name;
  }
  *out = nullptr;
  return Status(Errc::invalid_value,
                fmt::format("{} '{}' is not known; known {}s: {}", what, name, what, known));
}

// One value of an enum and its name: a table of them serves both directions.
template <class E>
struct EnumName {
  E value;
  const char* name;
};

template <class E, size_t N>
const char* enum_name(const EnumName<E> (&table)[N], E value) {
  for (const EnumName<E>& e : table)
    if (e.value == value) return e.name;
  return "?";
}

// The value named `name` (case-insensitive); an unknown name is an invalid_value naming
// the argument and listing every known name: "{arg} 'x' is not known; known {plural}: ...".
template <class E, size_t N>
Status parse_enum(const EnumName<E> (&table)[N], std::string_view name, const char* arg,
                  const char* plural, E* out) {
  std::string known;
  for (const EnumName<E>& e : table) {
    if (iequals(name, e.name)) {
      *out = e.value;
      return Status::Ok();
    }
    known += known.empty() ? "" : ", ";
    known += e.name;
  }
  return Status(Errc::invalid_value,
                fmt::format("{} '{}' is not known; known {}: {}", arg, name, plural, known));
}

}  // namespace mla::plan::detail
