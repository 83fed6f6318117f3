// `mla check`: prints the library's self check (mla/self_check.hpp) line by line as it
// runs and exits with its status: 0 every check passed, 1 a check failed, 77 nothing to
// check here (no CUDA GPU, or a build without CUDA kernels).
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "cli_checks.hpp"
#include "commands.hpp"
#include "mla/self_check.hpp"

namespace mla::cli {

void register_check_command(CLI::App& app) {
  auto seed = std::make_shared<uint64_t>(1);
  auto* sub = app.add_subcommand(
      "check",
      "run each kernel family on the local GPU against the CPU reference (small shapes) and "
      "say what passed; exit 0 all passed, 1 a failure, 77 no CUDA GPU");
  sub->add_option("--seed", *seed, "seed of the random inputs")
      ->check(decimal_integer(0))
      ->capture_default_str();
  sub->callback([seed] {
    const SelfCheckResult r = self_check(*seed, [](const std::string& line) {
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    });
    std::exit(r.status);
  });
}

}  // namespace mla::cli
