#include "unstuck/common/allocator.h"

#include <malloc.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "unstuck/common/error.h"

namespace unstuck {

bool keep_freed_memory() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  const char* choice = std::getenv("UNSTUCK_MALLOC");
  if (choice && *choice && std::strcmp(choice, "default") != 0 && std::strcmp(choice, "reuse") != 0)
    throw UserError(std::string("UNSTUCK_MALLOC=") + choice +
                    ": expected 'reuse' (the default) or 'default' (glibc's own settings)");
  if ((tunables && std::strstr(tunables, "glibc.malloc.")) || (choice && std::strcmp(choice, "default") == 0))
    return false;
  // Setting either threshold turns off glibc's dynamic mmap threshold; both are set together.
  return mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1 && mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1;
}

void release_freed_memory() { malloc_trim(0); }

}  // namespace unstuck
