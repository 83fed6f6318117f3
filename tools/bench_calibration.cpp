#include "bench_calibration.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <sstream>
#include <tuple>
#include <vector>

namespace mla::cli {
namespace {

Status bad(std::string msg) {
  return Status(Errc::invalid_value, std::move(msg));
}

struct Fit {
  double overhead_us = 0, fraction = 0, worst = 0;
};

// Least squares t = o + a * floor with o >= 0 (a negative intercept means the points say
// nothing about a fixed cost: fit through the origin instead), fraction = 1 / a.
Fit fit(const std::vector<std::pair<double, double>>& pts) {
  const double n = double(pts.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (auto [x, y] : pts) sx += x, sy += y, sxx += x * x, sxy += x * y;
  const double det = n * sxx - sx * sx;
  double a = pts.size() > 1 && det > 0 ? (n * sxy - sx * sy) / det : sy / sx;
  double o = (sy - a * sx) / n;
  if (!(o >= 0) || !(a > 0)) o = 0, a = sxy / sxx;
  Fit f;
  f.overhead_us = o;
  f.fraction = std::min(1.0, 1.0 / a);
  for (auto [x, y] : pts) f.worst = std::max(f.worst, std::fabs(o + x / f.fraction - y) / y);
  return f;
}

}  // namespace

bool is_bench_document(const nlohmann::json& doc) {
  return doc.is_object() && doc.contains("mla_bench");
}

std::string planner_gpu_name(const std::string& device_name) {
  std::string lower;
  for (char c : device_name) lower += char(std::tolower(static_cast<unsigned char>(c)));
  std::istringstream words(lower);
  std::string w;
  while (words >> w)
    for (const plan::GpuSpec& g : plan::known_gpus())
      if (w == g.name) return g.name;
  return "";
}

Status calibration_from_bench(const nlohmann::json& doc, const plan::GpuSpec& gpu,
                              plan::Calibration* out, std::string* summary) {
  if (!doc.contains("results") || !doc["results"].is_array())
    return bad("bench file: \"results\" (array) is missing");
  const std::string device = doc.value("device", std::string("?"));
  const std::string measured_on = doc.contains("gpu") && doc["gpu"].is_string()
                                      ? doc["gpu"].get<std::string>()
                                      : planner_gpu_name(device);
  if (measured_on != gpu.name)
    return bad(fmt::format(
        "bench file: measured on '{}' ({}), but the plan is for --gpu {}: a calibration only "
        "describes the GPU it was measured on",
        device, measured_on.empty() ? "a GPU the planner does not know" : measured_on, gpu.name));
  const plan::Ceilings c = plan::ceilings_for(gpu);
  using Key = std::tuple<std::string, std::string, int>;
  std::map<Key, std::vector<std::pair<double, double>>> series;
  const auto& rows = doc["results"];
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    if (!r.is_object() || !r.contains("calibration")) continue;  // diagnostics rows
    const auto& k = r["calibration"];
    auto num = [&](const nlohmann::json& o, const char* key, double* v) {
      if (!o.contains(key) || !o[key].is_number()) return false;
      *v = o[key].get<double>();
      return std::isfinite(*v);
    };
    double t = 0, flops = 0, bytes = 0, h = 0;
    if (!k.is_object() || !k.contains("kernel") || !k["kernel"].is_string() ||
        !k.contains("format") || !k["format"].is_string() || !num(k, "h_q", &h) ||
        !num(r, "time_us", &t) || !num(r, "flops", &flops) || !num(r, "bytes", &bytes))
      return bad(fmt::format(
          "bench file: results[{}] needs calibration.{{kernel, format, h_q}}, time_us, flops "
          "and bytes",
          i));
    if (!(t > 0) || flops < 0 || bytes < 0 || !(flops + bytes > 0))
      return bad(
          fmt::format("bench file: results[{}]: time_us = {}, flops = {}, bytes = {} "
                      "must be positive",
                      i, t, flops, bytes));
    const double peak =
        k.value("compute", std::string("bf16")) == "fp8" ? c.fp8_flops : c.bf16_flops;
    const double floor_us = std::max(flops / peak, bytes / c.read_bw) * 1e6;
    series[{k["kernel"].get<std::string>(), k["format"].get<std::string>(), int(h)}].push_back(
        {floor_us, t});
  }
  if (series.empty())
    return bad(
        "bench file: no result carries a \"calibration\" key (this suite's rows are "
        "diagnostics; `mla bench decode`, `sparse --calibration`, `indexer --calibration`, "
        "`topk --calibration` and `prefill` write calibration rows)");
  // The entries go through the planner's own parser, so they obey the documented schema.
  nlohmann::json cal = {{"gpu", gpu.name},
                        {"source", fmt::format("fitted by mla plan from mla bench {} on {}",
                                               doc.value("suite", std::string("?")), device)},
                        {"entries", nlohmann::json::array()}};
  for (const auto& [key, pts] : series) {
    const Fit f = fit(pts);
    const auto& [kernel, format, h_q] = key;
    cal["entries"].push_back({{"kernel", kernel},
                              {"format", format},
                              {"h_q", h_q},
                              {"fraction_of_ceiling", f.fraction},
                              {"overhead_us", f.overhead_us}});
    *summary += fmt::format(
        "  {:<14} {:<5} h_q {:<4} {:3} point(s): fraction {:.3f}, overhead {:.1f} us, worst "
        "fit error {:.1f}%\n",
        kernel, format, h_q, pts.size(), f.fraction, f.overhead_us, 100 * f.worst);
  }
  return plan::parse_calibration(cal.dump(), out);
}

}  // namespace mla::cli
