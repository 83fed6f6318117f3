// C ABI of the planner (mla/plan.hpp): a workload in, the plan's JSON (or
// table) out; the seed check; the GPUs and models the planner knows.
#include <nlohmann/json.hpp>
#include <string>

#include "capi/capi_common.hpp"
#include "mla/plan.hpp"
#include "plan/spec_json.hpp"

using namespace mla;
using namespace mla::capi;

namespace {

Status to_workload(const mla_plan_workload& c, plan::Workload* w) {
  for (auto [s, name] : {std::pair{c.model, "workload.model"}, std::pair{c.gpu, "workload.gpu"},
                         std::pair{c.phase, "workload.phase"}, std::pair{c.kv, "workload.kv"}})
    MLA_TRY(expect_pointer(s, name));
  w->model = c.model;
  w->gpu = c.gpu;
  MLA_TRY(plan::parse_phase(c.phase, &w->phase));
  MLA_TRY(plan::parse_kv_precision(c.kv, &w->kv));
  w->batch = c.batch;
  w->context = c.context;
  w->new_tokens = c.new_tokens;
  w->tp = c.tp;
  w->weight_shards = c.weight_shards;
  w->topk = c.topk;
  w->mem_util = c.mem_util;
  return Status::Ok();
}

}  // namespace

extern "C" {

void mla_plan_default_workload(mla_plan_workload* c) {
  if (c == nullptr) return;
  // The default names of plan::Workload, as the catalog's static strings (the
  // struct points at them); the lookups cannot fail for the defaults.
  const plan::Workload d;
  const plan::ModelSpec* m = nullptr;
  const plan::GpuSpec* g = nullptr;
  (void)plan::find_model(d.model, &m);
  (void)plan::find_gpu(d.gpu, &g);
  *c = mla_plan_workload{m != nullptr ? m->name : "",
                         g != nullptr ? g->name : "",
                         plan::phase_name(d.phase),
                         plan::kv_precision_name(d.kv),
                         d.batch,
                         d.context,
                         d.new_tokens,
                         d.tp,
                         d.weight_shards,
                         d.topk,
                         d.mem_util};
}

int32_t mla_plan(const mla_plan_workload* workload, const char* calibration_json, int32_t as_text,
                 char* buf, size_t buf_size, size_t* length) {
  return guarded([&] {
    MLA_TRY(expect_pointer(workload, "workload"));
    plan::Workload w;
    MLA_TRY(to_workload(*workload, &w));
    plan::Calibration cal;
    if (calibration_json != nullptr) MLA_TRY(plan::parse_calibration(calibration_json, &cal));
    plan::Plan p;
    MLA_TRY(plan::make_plan(w, calibration_json != nullptr ? &cal : nullptr, &p));
    return write_text(as_text ? plan::render_text(p) : plan::render_json(p), buf, buf_size, length);
  });
}

int32_t mla_plan_seed_check(int32_t as_text, char* buf, size_t buf_size, size_t* length) {
  return guarded([&] {
    const auto rows = plan::seed_check();
    return write_text(
        as_text ? plan::render_seed_check_text(rows) : plan::render_seed_check_json(rows), buf,
        buf_size, length);
  });
}

int32_t mla_plan_catalog(char* buf, size_t buf_size, size_t* length) {
  return guarded([&] {
    nlohmann::json j = {{"gpus", nlohmann::json::array()}, {"models", nlohmann::json::array()}};
    for (const plan::GpuSpec& g : plan::known_gpus()) j["gpus"].push_back(plan::gpu_json(g));
    for (const plan::ModelSpec& m : plan::known_models())
      j["models"].push_back(plan::model_json(m));
    return write_text(j.dump(2), buf, buf_size, length);
  });
}

}  // extern "C"
