// Calibration files: measured kernel efficiencies (fraction of the roofline floor a
// kernel reached on this GPU), written by our benchmark. Schema in docs/planner.md.
#include <fmt/format.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "mla/plan.hpp"

namespace mla::plan {
namespace {

// The kernels the cost model prices (StageCost::calib_kernel) and the formats they take.
constexpr std::array<const char*, 8> kKernels = {"decode",     "sparse_decode", "indexer",
                                                 "topk",       "prefill",       "sparse_prefill",
                                                 "decompress", "projections"};
constexpr std::array<const char*, 6> kFormats = {"bf16", "fp8", "fp4", "mha", "gqa", "fp32"};

template <size_t N>
bool one_of(const std::string& s, const std::array<const char*, N>& set, std::string* list) {
  bool found = false;
  for (const char* k : set) {
    if (s == k) found = true;
    *list += list->empty() ? "" : ", ";
    *list += k;
  }
  return found;
}

Status bad(std::string msg) {
  return Status(Errc::invalid_value, std::move(msg));
}

}  // namespace

const CalibrationEntry* Calibration::find(std::string_view kernel, std::string_view format,
                                          int h_q) const {
  const CalibrationEntry* best = nullptr;
  for (const CalibrationEntry& e : entries) {
    if (e.kernel != kernel || e.format != format) continue;
    // Nearest by ratio: efficiency follows heads multiplicatively (64 is nearer 128 than 16).
    auto dist = [h_q](int h) { return std::fabs(std::log(double(h) / double(h_q))); };
    if (best == nullptr || dist(e.h_q) < dist(best->h_q)) best = &e;
  }
  return best;
}

Status parse_calibration(std::string_view text, Calibration* out) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return bad("calibration: not valid JSON");
  if (!j.is_object()) return bad("calibration: the top level must be an object");
  Calibration c;
  if (!j.contains("gpu") || !j["gpu"].is_string())
    return bad("calibration: \"gpu\" (string) is missing");
  c.gpu = j["gpu"].get<std::string>();
  if (j.contains("source")) {
    if (!j["source"].is_string()) return bad("calibration: \"source\" must be a string");
    c.source = j["source"].get<std::string>();
  }
  if (!j.contains("entries") || !j["entries"].is_array())
    return bad("calibration: \"entries\" (array) is missing");
  const auto& es = j["entries"];
  for (size_t i = 0; i < es.size(); ++i) {
    const auto& e = es[i];
    if (!e.is_object()) return bad(fmt::format("calibration: entries[{}] is not an object", i));
    for (const char* key : {"kernel", "format"})
      if (!e.contains(key) || !e[key].is_string())
        return bad(fmt::format("calibration: entries[{}].{} (string) is missing", i, key));
    if (!e.contains("h_q") || !e["h_q"].is_number_integer())
      return bad(fmt::format("calibration: entries[{}].h_q (integer) is missing", i));
    if (!e.contains("fraction_of_ceiling") || !e["fraction_of_ceiling"].is_number())
      return bad(
          fmt::format("calibration: entries[{}].fraction_of_ceiling (number) is missing", i));
    CalibrationEntry ce;
    ce.kernel = e["kernel"].get<std::string>();
    ce.format = e["format"].get<std::string>();
    // Read wide, then range-checked below: get<int>() would wrap 2^32 + 8 to 8.
    const int64_t h_q = e["h_q"].is_number_unsigned() && e["h_q"].get<uint64_t>() > INT64_MAX
                            ? INT64_MAX
                            : e["h_q"].get<int64_t>();
    ce.fraction_of_ceiling = e["fraction_of_ceiling"].get<double>();
    if (e.contains("overhead_us")) {
      if (!e["overhead_us"].is_number())
        return bad(fmt::format("calibration: entries[{}].overhead_us must be a number", i));
      ce.overhead_us = e["overhead_us"].get<double>();
      if (!(ce.overhead_us >= 0 && ce.overhead_us < 1e6))
        return bad(fmt::format(
            "calibration: entries[{}].overhead_us = {} must be in [0, 1e6) microseconds", i,
            ce.overhead_us));
    }
    std::string list;
    if (!one_of(ce.kernel, kKernels, &list))
      return bad(fmt::format("calibration: entries[{}].kernel = '{}' is not known; known: {}", i,
                             ce.kernel, list));
    list.clear();
    if (!one_of(ce.format, kFormats, &list))
      return bad(fmt::format("calibration: entries[{}].format = '{}' is not known; known: {}", i,
                             ce.format, list));
    if (h_q < 1 || h_q > 1024)
      return bad(fmt::format("calibration: entries[{}].h_q = {} must be in [1, 1024]", i,
                             e["h_q"].dump()));
    ce.h_q = static_cast<int>(h_q);
    if (!(ce.fraction_of_ceiling > 0 && ce.fraction_of_ceiling <= 1))
      return bad(
          fmt::format("calibration: entries[{}].fraction_of_ceiling = {} must be in (0, 1] "
                      "(a kernel cannot beat its roofline)",
                      i, ce.fraction_of_ceiling));
    c.entries.push_back(std::move(ce));
  }
  *out = std::move(c);
  return Status::Ok();
}

Status load_calibration(const std::string& path, Calibration* out) {
  std::ifstream f(path);
  if (!f) return bad(fmt::format("calibration: cannot open '{}'", path));
  std::stringstream ss;
  ss << f.rdbuf();
  Status st = parse_calibration(ss.str(), out);
  if (!st.ok()) return Status(st.code(), fmt::format("{} ({})", st.message(), path));
  if (out->source.empty()) out->source = path;
  return Status::Ok();
}

}  // namespace mla::plan
