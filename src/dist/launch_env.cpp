// The launch environment of a process (include/unstuck/dist/launch_env.h): RANK, WORLD_SIZE,
// LOCAL_RANK, MASTER_ADDR, MASTER_PORT, checked. Libtorch-free, so the pre-flight (config) and the
// trainer read the same LOCAL_RANK.
#include "unstuck/dist/launch_env.h"

#include <cstdlib>
#include <string>

#include "unstuck/common/error.h"

namespace unstuck::dist {
namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < 0 || x > 1 << 24)
    throw UserError(std::string("environment variable ") + name + " must be a non-negative integer, got '" + v + "'");
  return int(x);
}

}  // namespace

LaunchEnv launch_env_from_environment() {
  LaunchEnv e;
  e.world_size = env_int("WORLD_SIZE", 1);
  e.rank = env_int("RANK", 0);
  e.local_rank = env_int("LOCAL_RANK", e.rank);
  e.master_port = env_int("MASTER_PORT", e.master_port);
  if (const char* a = std::getenv("MASTER_ADDR"); a && *a) e.master_addr = a;
  if (e.world_size < 1) throw UserError("environment variable WORLD_SIZE must be >= 1, got 0");
  if (e.rank >= e.world_size)
    throw UserError("environment variable RANK (" + std::to_string(e.rank) + ") must be < WORLD_SIZE (" +
                    std::to_string(e.world_size) + ")");
  if (e.master_port < 1 || e.master_port > 65535)
    throw UserError("environment variable MASTER_PORT must be in [1, 65535], got " + std::to_string(e.master_port));
  if (e.world_size > 1 && !std::getenv("MASTER_PORT"))
    throw UserError("WORLD_SIZE is " + std::to_string(e.world_size) +
                    " but MASTER_PORT is not set (start the ranks with `unstuck launch`, torchrun or set "
                    "RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT)");
  return e;
}

}  // namespace unstuck::dist
