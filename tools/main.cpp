// mla: one CLI, subcommands plan / bench / check.
#include <CLI/CLI.hpp>
#include <iostream>

int main(int argc, char** argv) {
  CLI::App app{"mla: MLA/DSA attention on Hopper - planner, benchmarks, checks"};
  app.require_subcommand(1);
  auto* plan = app.add_subcommand("plan", "size a deployment (not yet implemented)");
  (void)plan;
  CLI11_PARSE(app, argc, argv);
  std::cerr << "not implemented yet\n";
  return 2;
}
