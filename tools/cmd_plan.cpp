// Placeholder until the plan subcommand lands; replaced by its owner.
#include <iostream>
#include "commands.hpp"
namespace mla::cli {
void register_plan_command(CLI::App& app) {
  auto* sub = app.add_subcommand("plan", "plan (not built yet)");
  sub->callback([] { std::cerr << "mla plan: not built yet\n"; std::exit(2); });
}
}  // namespace mla::cli
