// Placeholder until the check subcommand lands; replaced by its owner.
#include <iostream>
#include "commands.hpp"
namespace mla::cli {
void register_check_command(CLI::App& app) {
  auto* sub = app.add_subcommand("check", "check (not built yet)");
  sub->callback([] { std::cerr << "mla check: not built yet\n"; std::exit(2); });
}
}  // namespace mla::cli
