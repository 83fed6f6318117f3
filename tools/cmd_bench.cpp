// Placeholder until the bench subcommand lands; replaced by its owner.
#include <iostream>
#include "commands.hpp"
namespace mla::cli {
void register_bench_command(CLI::App& app) {
  auto* sub = app.add_subcommand("bench", "bench (not built yet)");
  sub->callback([] { std::cerr << "mla bench: not built yet\n"; std::exit(2); });
}
}  // namespace mla::cli
