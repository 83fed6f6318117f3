// CLI11 definitions of the suites' options (tools/bench_suites.hpp).
#pragma once
#include <CLI/CLI.hpp>

#include "bench_suites.hpp"

namespace mla::cli {

void add_ceiling_options(CLI::App& app, BenchCeilings& c);
// The suite's own options; --json and the ceilings are added by the caller (the suite
// program adds them as they are; `mla bench` adds its own --json once for every suite).
void add_options(CLI::App& app, PrefillBenchOptions& o);
void add_options(CLI::App& app, LayerBenchOptions& o);

}  // namespace mla::cli
