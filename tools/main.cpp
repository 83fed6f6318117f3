// mla: one CLI, subcommands plan / bench / check.
#include "commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"mla: MLA/DSA attention on Hopper - planner, benchmarks, checks"};
  app.require_subcommand(1);
  mla::cli::register_plan_command(app);
  mla::cli::register_bench_command(app);
  mla::cli::register_check_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return 0;
}
