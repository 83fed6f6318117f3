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

}  // namespace mla::plan::detail
