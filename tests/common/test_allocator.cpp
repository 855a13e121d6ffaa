// keep_freed_memory(): applies glibc malloc settings unless the user chose their own
// (GLIBC_TUNABLES with glibc.malloc.*) or opted out (UNSTUCK_MALLOC=default); a mistyped
// UNSTUCK_MALLOC is an error that names it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "unstuck/common/allocator.h"
#include "unstuck/common/error.h"

namespace unstuck {
namespace {

TEST(KeepFreedMemory, AppliesUnlessTheUserChoseOtherwise) {
  unsetenv("GLIBC_TUNABLES");
  unsetenv("UNSTUCK_MALLOC");
  EXPECT_TRUE(keep_freed_memory());
  setenv("UNSTUCK_MALLOC", "default", 1);
  EXPECT_FALSE(keep_freed_memory());
  setenv("UNSTUCK_MALLOC", "reuse", 1);
  EXPECT_TRUE(keep_freed_memory());
  setenv("UNSTUCK_MALLOC", "glibc", 1);  // a typo is named, not ignored
  EXPECT_THROW(
      try { keep_freed_memory(); } catch (const UserError& e) {
        EXPECT_NE(std::string(e.what()).find("UNSTUCK_MALLOC=glibc"), std::string::npos);
        throw;
      },
      UserError);
  unsetenv("UNSTUCK_MALLOC");
  setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2", 1);
  EXPECT_FALSE(keep_freed_memory());
  setenv("GLIBC_TUNABLES", "glibc.rtld.optional_static_tls=4096", 1);
  EXPECT_TRUE(keep_freed_memory());
  unsetenv("GLIBC_TUNABLES");
}

}  // namespace
}  // namespace unstuck
