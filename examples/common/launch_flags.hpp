// The launch flags every multi-process example takes: torchrun's environment
// (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) by default, or the
// same values as explicit flags when no launcher is used.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

#include "mla/status.hpp"
#include "mla/transfer.hpp"

namespace mla::examples {

struct LaunchFlags {
  int rank = -1, world = -1, local = -1, port = 0;
  std::string addr;
};

inline void add_launch_flags(CLI::App& app, LaunchFlags& f) {
  app.add_option("--rank", f.rank, "instead of RANK");
  app.add_option("--world-size", f.world, "instead of WORLD_SIZE");
  app.add_option("--local-rank", f.local, "instead of LOCAL_RANK");
  app.add_option("--master-addr", f.addr, "instead of MASTER_ADDR");
  app.add_option("--master-port", f.port, "instead of MASTER_PORT");
}

// Explicit flags when --rank is given (defaults: world 2, local = rank,
// 127.0.0.1, default_port), else torchrun's environment.
inline Status resolve_launch(const LaunchFlags& f, int default_port, LaunchInfo* who) {
  if (f.rank >= 0) {
    *who = {f.rank, f.world < 0 ? 2 : f.world, f.local < 0 ? f.rank : f.local,
            f.addr.empty() ? "127.0.0.1" : f.addr, f.port ? f.port : default_port};
    return Status::Ok();
  }
  return launch_info_from_env(who);
}

}  // namespace mla::examples
