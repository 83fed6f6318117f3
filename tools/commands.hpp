// Each subcommand of the mla CLI lives in its own file and registers itself here.
#pragma once
#include <CLI/CLI.hpp>

namespace mla::cli {
void register_plan_command(CLI::App& app);   // tools/cmd_plan.cpp
void register_bench_command(CLI::App& app);  // tools/cmd_bench.cpp
void register_check_command(CLI::App& app);  // tools/cmd_check.cpp
}  // namespace mla::cli
