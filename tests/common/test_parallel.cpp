// Thread resolution: `threads: 0` means the CPUs this process may actually use (affinity mask,
// cgroup quota), shared among the ranks on the machine; and the chunked loop covers [0, n) once.
#include <gtest/gtest.h>
#include <sched.h>
#include <stdlib.h>

#include <atomic>
#include <vector>

#include "unstuck/common/parallel.h"

namespace unstuck {
namespace {

// Restores the process's affinity mask and LOCAL_WORLD_SIZE when a test ends.
class AffinityGuard {
 public:
  AffinityGuard() { sched_getaffinity(0, sizeof(saved_), &saved_); }
  ~AffinityGuard() {
    sched_setaffinity(0, sizeof(saved_), &saved_);
    unsetenv("LOCAL_WORLD_SIZE");
  }
  const cpu_set_t& saved() const { return saved_; }

 private:
  cpu_set_t saved_;
};

TEST(ResolveThreads, ExplicitCountIsKept) { EXPECT_EQ(resolve_threads(3), 3); }

TEST(ResolveThreads, ZeroRespectsTheAffinityMask) {
  AffinityGuard guard;
  unsetenv("LOCAL_WORLD_SIZE");
  int first = -1;
  for (int c = 0; c < CPU_SETSIZE && first < 0; ++c)
    if (CPU_ISSET(c, &guard.saved())) first = c;
  ASSERT_GE(first, 0);
  cpu_set_t one;  // what `taskset -c <first>` gives a process
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  EXPECT_EQ(usable_cpus(), 1);
  EXPECT_EQ(resolve_threads(0), 1);
}

TEST(ResolveThreads, ZeroSharesCpusAmongLocalRanks) {
  AffinityGuard guard;
  const int cpus = usable_cpus();
  setenv("LOCAL_WORLD_SIZE", "2", 1);
  EXPECT_EQ(resolve_threads(0), std::max(1, cpus / 2));
}

TEST(CgroupQuota, ParsesV2AndV1Forms) {
  EXPECT_EQ(cpus_from_cgroup_quota("max 100000"), 0);
  EXPECT_EQ(cpus_from_cgroup_quota("100000 100000"), 1);
  EXPECT_EQ(cpus_from_cgroup_quota("150000 100000"), 2);
  EXPECT_EQ(cpus_from_cgroup_quota("50000 100000"), 1);
  EXPECT_EQ(cpus_from_cgroup_quota("400000 100000"), 4);
  EXPECT_EQ(cpus_from_cgroup_quota("-1 100000"), 0);  // cgroup v1: no quota
  EXPECT_EQ(cpus_from_cgroup_quota(""), 0);
  EXPECT_EQ(cpus_from_cgroup_quota("12x 100000"), 0);
  EXPECT_EQ(cpus_from_cgroup_quota("100000 0"), 0);
}

TEST(ParallelChunks, CoversTheRangeOnceWithAlignedBoundaries) {
  const std::size_t n = 1000;
  std::vector<std::atomic<int>> hits(n);
  parallel_chunks(n, 3, 64, [&](std::size_t b, std::size_t e, int) {
    EXPECT_EQ(b % 64, 0u);
    for (std::size_t i = b; i < e; ++i) hits[i]++;
  });
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << i;
}

}  // namespace
}  // namespace unstuck
