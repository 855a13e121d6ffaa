// This process's memory as the kernel counts it (what an out-of-memory kill looks at): the resident
// set now and its high-water mark, the ceiling the kernel enforces (the cgroup's memory limit, or
// the machine's memory); and the time since the process was started (loading libtorch and static
// initialization included).
#pragma once

#include <cstdint>
#include <string>

namespace unstuck {

// Resident set size now (VmRSS of /proc/self/status), in bytes; 0 when unknown.
int64_t current_rss_bytes();
// Highest resident set size since the process started (VmHWM), in bytes; 0 when unknown.
int64_t peak_rss_bytes();
// Resident set size now of every process descended from this one (children, their children, ...;
// the reward workers and their sandboxes), summed, in bytes; 0 when there are none.
int64_t descendants_rss_bytes();

// A memory ceiling the kernel enforces, and what is used of it now.
struct MemoryCeiling {
  double limit = 0;    // bytes; 0 = none known
  double used = 0;     // bytes counted against it
  std::string source;  // "/sys/fs/cgroup/memory.max", "/proc/meminfo"
};
// The memory limit of this process's cgroup, whose out-of-memory killer acts at it: cgroup v2
// memory.max with memory.current, else v1 memory.limit_in_bytes with memory.usage_in_bytes; `used`
// is the working set (usage less the inactive file cache, which the kernel reclaims first). The
// directory is UNSTUCK_CGROUP_MEMORY_DIR when set (either layout), else this process's v2 cgroup
// under /sys/fs/cgroup, else /sys/fs/cgroup/memory (v1). limit 0 when none is set ("max").
MemoryCeiling cgroup_memory_ceiling();
// The machine's: MemTotal + SwapTotal, of which all but MemAvailable + SwapFree is used
// (/proc/meminfo).
MemoryCeiling host_memory_ceiling();
// Seconds since this process was started (/proc/self/stat's start time against CLOCK_BOOTTIME,
// 10 ms resolution); -1 when unknown.
double seconds_since_process_start();

}  // namespace unstuck
