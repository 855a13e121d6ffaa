// keep_freed_memory(): applies glibc malloc settings unless the user chose their own
// (GLIBC_TUNABLES with glibc.malloc.*) or opted out (UNSTUCK_MALLOC=default).
#include <gtest/gtest.h>

#include <cstdlib>

#include "unstuck/common/allocator.h"

namespace unstuck {
namespace {

TEST(KeepFreedMemory, AppliesUnlessTheUserChoseOtherwise) {
  unsetenv("GLIBC_TUNABLES");
  unsetenv("UNSTUCK_MALLOC");
  EXPECT_TRUE(keep_freed_memory());
  setenv("UNSTUCK_MALLOC", "default", 1);
  EXPECT_FALSE(keep_freed_memory());
  unsetenv("UNSTUCK_MALLOC");
  setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2", 1);
  EXPECT_FALSE(keep_freed_memory());
  setenv("GLIBC_TUNABLES", "glibc.rtld.optional_static_tls=4096", 1);
  EXPECT_TRUE(keep_freed_memory());
  unsetenv("GLIBC_TUNABLES");
}

}  // namespace
}  // namespace unstuck
