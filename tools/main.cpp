// mla: one CLI, subcommands plan / bench / check.
#include <cstdio>
#include <string>

#include "commands.hpp"
#include "mla/c_api.h"

namespace {

std::string version_text() {
  std::string v = std::string("mla ") + MLA_CLI_VERSION + " (libmla " + mla_version() + ", C ABI " +
                  std::to_string(mla_abi_version()) + ", ";
  v += mla_built_with_cuda() ? "CUDA kernels for sm_90a)" : "no CUDA kernels: CPU reference only)";
  return v;
}

// CLI11 answers an unknown subcommand ("mla foo", "mla bench foo") with "A subcommand is
// required"; name the word and the choices instead. Only apps with subcommands and no
// valued options of their own are walked (the top level and `bench`), so every bare word
// there is meant as a subcommand.
int unknown_subcommand(CLI::App& app, int argc, char** argv) {
  CLI::App* cur = &app;
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word.empty() || word[0] == '-') continue;
    const auto subs = cur->get_subcommands([](CLI::App*) { return true; });
    if (subs.empty()) return 0;
    CLI::App* next = nullptr;
    std::string names;
    for (CLI::App* s : subs) {
      if (s->check_name(word)) next = s;
      names += (names.empty() ? "" : ", ") + s->get_name();
    }
    if (next == nullptr) {
      const std::string where = cur == &app ? "mla" : "mla " + cur->get_name();
      std::fprintf(stderr, "%s: unknown subcommand '%s'; the subcommands are: %s (%s --help)\n",
                   where.c_str(), word.c_str(), names.c_str(), where.c_str());
      return static_cast<int>(CLI::ExitCodes::ExtrasError);
    }
    cur = next;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mla: MLA/DSA attention on Hopper - planner, benchmarks, checks"};
  app.require_subcommand(1);
  app.set_version_flag("--version", version_text());
  mla::cli::register_plan_command(app);
  mla::cli::register_bench_command(app);
  mla::cli::register_check_command(app);
  if (int rc = unknown_subcommand(app, argc, argv)) return rc;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return 0;
}
