// Test helpers for the planner: build a plan that must succeed, and find a
// format row or a recommendation by name (a missing one fails the test).
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "mla/plan.hpp"

namespace mla::plan::testing {

inline Plan make(Workload w, const Calibration* cal = nullptr) {
  Plan p;
  Status st = make_plan(w, cal, &p);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return p;
}

inline const FormatPlan& row(const Plan& p, const std::string& name) {
  for (const FormatPlan& f : p.formats)
    if (f.name == name) return f;
  ADD_FAILURE() << "no format row " << name;
  return p.formats.front();
}

inline const Recommendation& rec(const Plan& p, const std::string& item) {
  for (const Recommendation& r : p.recommendations)
    if (r.item == item) return r;
  ADD_FAILURE() << "no recommendation " << item;
  return p.recommendations.front();
}

}  // namespace mla::plan::testing
