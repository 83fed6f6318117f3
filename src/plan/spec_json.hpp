// The planner's catalog types as JSON, written in one place: `mla plan --json`
// (report.cpp) and the C ABI's catalog (capi/c_api_plan.cpp) both use these,
// so a field added to a spec appears in both outputs with the same key.
#pragma once
#include <nlohmann/json.hpp>

#include "mla/plan.hpp"

namespace mla::plan {

// Every field of the GPU row; "measured" only when we measured that GPU.
nlohmann::json gpu_json(const GpuSpec& g);
// Every field of the model row.
nlohmann::json model_json(const ModelSpec& m);

}  // namespace mla::plan
