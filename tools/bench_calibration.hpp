// `mla plan --calibrate FILE` with FILE written by `mla bench <suite> --json`: the fit of
// docs/planner.md (per kernel, t = overhead_us + floor_us / fraction_of_ceiling, least
// squares over the measured points) runs here, so a benchmark's JSON is a calibration.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "mla/plan.hpp"
#include "mla/status.hpp"

namespace mla::cli {

// True when `doc` is a document `mla bench --json` writes ("mla_bench" key).
bool is_bench_document(const nlohmann::json& doc);

// Fits one calibration entry per (kernel, format, h_q) from the rows of `doc` that carry a
// "calibration" object ({kernel, format, h_q, compute}) with "time_us", "flops" and "bytes".
// Floors are recomputed with the planner's ceilings for `gpu`, so the fractions mean what
// the planner's predictions divide by. `summary` gets one line per fitted entry.
Status calibration_from_bench(const nlohmann::json& doc, const plan::GpuSpec& gpu,
                              plan::Calibration* out, std::string* summary);

// The planner's name of a CUDA device ("NVIDIA H200" -> "h200"), or "" when it knows none.
std::string planner_gpu_name(const std::string& device_name);

}  // namespace mla::cli
