// descendants_rss_bytes(): the resident memory of this process's children and their children (the
// reward workers and their sandboxes), which the memory plan counts as other processes' part; and
// seconds_since_process_start(), from the same /proc stat fields.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "unstuck/common/memory_usage.h"

namespace unstuck {
namespace {

constexpr int64_t MiB = int64_t(1) << 20;

// A child that forks a grandchild; the grandchild touches `mib` MiB and both wait on a pipe.
TEST(MemoryUsage, DescendantsRssCountsChildrenAndGrandchildren) {
  const int64_t before = descendants_rss_bytes();
  int ready[2], release[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(release), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const pid_t grandchild = ::fork();
    if (grandchild == 0) {
      const std::size_t bytes = std::size_t(96 * MiB);
      char* block = static_cast<char*>(std::malloc(bytes));
      if (block == nullptr) ::_exit(1);
      std::memset(block, 1, bytes);
      char c = 'r';
      if (::write(ready[1], &c, 1) != 1) ::_exit(1);
      if (::read(release[0], &c, 1) < 0) ::_exit(1);
      ::_exit(block[bytes - 1] == 1 ? 0 : 1);
    }
    char c;
    if (::read(release[0], &c, 1) < 0) ::_exit(1);
    int status = 0;
    ::waitpid(grandchild, &status, 0);
    ::_exit(0);
  }
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  const int64_t during = descendants_rss_bytes();
  const char go[2] = {'g', 'g'};
  ASSERT_EQ(::write(release[1], go, 2), 2);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  // The grandchild's 96 MiB are counted (a parent's own copy-on-write pages add to it, never less).
  EXPECT_GE(during - before, 96 * MiB) << "before " << before << " during " << during;
  EXPECT_LT(during - before, 96 * MiB + current_rss_bytes() * 2 + 64 * MiB);
  EXPECT_LE(descendants_rss_bytes(), before + 8 * MiB);  // gone once they exit
}

// seconds_since_process_start() reads the start time from /proc/self/stat (after the command name):
// this test process started before the test ran, and the clock advances with the wall clock.
TEST(MemoryUsage, SecondsSinceProcessStartFollowsTheWallClock) {
  const double first = seconds_since_process_start();
  ASSERT_GE(first, 0.0);
  EXPECT_LT(first, 3600.0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const double second = seconds_since_process_start();
  EXPECT_GE(second - first, 0.18);  // the start time has a tick's resolution (10 ms); the clocks agree
  EXPECT_LT(second - first, 5.0);
}

}  // namespace
}  // namespace unstuck
