// torchrun's launch conventions: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
// MASTER_PORT. Values are parsed strictly: a typo must not start rank 0 twice.
#include <cerrno>
#include <cstdlib>
#include <string>

#include "common/validate.hpp"
#include "mla/transfer.hpp"

namespace mla {
namespace {

using detail::error;

// An integer variable; `required` false leaves *out alone when it is unset.
Status env_int(const std::function<const char*(const char*)>& get, const char* name, bool required,
               int lo, int hi, int* out) {
  const char* v = get(name);
  if (v == nullptr || *v == '\0') {
    if (required)
      return error(Errc::invalid_value,
                   "{} is not set (start each process with torchrun, or set RANK, WORLD_SIZE, "
                   "MASTER_ADDR and MASTER_PORT)",
                   name);
    return Status::Ok();
  }
  errno = 0;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0')
    return error(Errc::invalid_value, "{} = \"{}\" is not an integer", name, v);
  if (x < lo || x > hi)
    return error(Errc::out_of_range, "{} = {} is outside [{}, {}]", name, x, lo, hi);
  *out = static_cast<int>(x);
  return Status::Ok();
}

}  // namespace

Status launch_info_from_env(LaunchInfo* out,
                            const std::function<const char*(const char*)>& lookup) {
  if (out == nullptr) return error(Errc::invalid_value, "out: output pointer is null");
  std::function<const char*(const char*)> get = lookup;
  if (!get) get = [](const char* n) { return static_cast<const char*>(std::getenv(n)); };
  LaunchInfo li;
  MLA_TRY(env_int(get, "WORLD_SIZE", true, 1, 1 << 20, &li.world_size));
  MLA_TRY(env_int(get, "RANK", true, 0, li.world_size - 1, &li.rank));
  li.local_rank = li.rank;
  MLA_TRY(env_int(get, "LOCAL_RANK", false, 0, 1 << 16, &li.local_rank));
  const char* addr = get("MASTER_ADDR");
  li.master_addr = addr && *addr ? addr : "127.0.0.1";
  MLA_TRY(env_int(get, "MASTER_PORT", li.world_size > 1, 1, 65535, &li.master_port));
  *out = std::move(li);
  return Status::Ok();
}

}  // namespace mla
