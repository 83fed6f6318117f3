// The dense/DSA decode threshold the DSA step's dispatch uses (mla/dsa.hpp):
// the planner's cost model (roofline.cpp's step_cost) for a batch of requests,
// dense absorbed decode against indexer + top-k + sparse attention, bisected
// over the context in 64-token pages. On floors alone batch cancels (both steps
// scale linearly with it); a calibration's per-call overheads make it matter.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>

#include "mla/dsa.hpp"
#include "mla/plan.hpp"
#include "plan/internal.hpp"

namespace mla {

namespace {

Status bad(std::string msg) {
  return Status(Errc::invalid_value, std::move(msg));
}

bool same_name(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace

Status plan::dsa_dense_threshold(const char* gpu, const char* calibration_json, int64_t* tokens,
                                 const plan::DsaThresholdOptions& o) {
  if (tokens == nullptr) return bad("tokens: output pointer is null");
  *tokens = 0;
  if (gpu == nullptr) return bad("gpu: null (a GPU name such as \"h200\" is needed)");
  if (o.model == nullptr) return bad("opts.model: null");
  if (o.kv == nullptr) return bad("opts.kv: null");
  const plan::GpuSpec* g = nullptr;
  const plan::ModelSpec* m = nullptr;
  MLA_TRY(plan::find_gpu(gpu, &g));
  MLA_TRY(plan::find_model(o.model, &m));
  if (m->indexer_heads == 0)
    return bad(
        fmt::format("opts.model = \"{}\" has no lightning indexer: no DSA step to price", m->name));
  plan::KvFormat f;
  if (std::string_view(o.kv) == "bf16")
    f = plan::KvFormat::mla_bf16;
  else if (std::string_view(o.kv) == "fp8")
    f = plan::KvFormat::mla_fp8;
  else
    return bad(fmt::format("opts.kv = \"{}\" is not \"bf16\" or \"fp8\"", o.kv));
  if (o.heads < 1 || o.heads > m->heads)
    return bad(fmt::format("opts.heads = {} is outside [1, {}] ({}'s query heads)", o.heads,
                           m->heads, m->name));
  if (o.new_tokens < 1 || o.new_tokens > 4)
    return bad(fmt::format("opts.new_tokens = {} is outside [1, 4]", o.new_tokens));
  if (o.batch < 1) return bad(fmt::format("opts.batch = {} must be at least 1", o.batch));
  if (o.topk < 64 || o.topk > 8192 || o.topk % 64 != 0)
    return bad(fmt::format("opts.topk = {} is not a multiple of 64 in [64, 8192]", o.topk));

  plan::Calibration cal;
  const bool calibrated = calibration_json != nullptr;
  if (calibrated) {
    MLA_TRY(plan::parse_calibration(calibration_json, &cal));
    if (!same_name(cal.gpu, g->name))
      return bad(fmt::format("calibration: \"gpu\" = \"{}\" is not the asked gpu \"{}\"", cal.gpu,
                             g->name));
  }
  const plan::Ceilings c = plan::ceilings_for(*g);
  auto dsa_cheaper = [&](int64_t L) {
    const plan::detail::StepShape s{o.batch, L, o.new_tokens, o.heads, 1, o.topk, false};
    const plan::Calibration* cp = calibrated ? &cal : nullptr;
    return plan::detail::step_cost(*m, f, true, s, c, cp).predicted_s <
           plan::detail::step_cost(*m, f, false, s, c, cp).predicted_s;
  };
  *tokens = plan::detail::first_context_where_dsa_is_cheaper(o.topk, dsa_cheaper);
  return Status::Ok();
}

}  // namespace mla
