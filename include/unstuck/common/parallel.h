// Minimal fork-join parallel loop for CPU kernels: splits [0, n) into one contiguous chunk per
// thread. Results of our kernels never depend on the split (the SR bits are keyed by global index).
#pragma once

#include <cstddef>
#include <functional>
#include <string>

namespace unstuck {

// CPUs this process may run on: the CPUs of its affinity mask (taskset, Slurm, numactl), capped by
// the cgroup's CPU quota (docker --cpus, Kubernetes limits), at least 1.
int usable_cpus();

// CPUs granted by a cgroup quota written as "QUOTA PERIOD" (cgroup v2 cpu.max, or v1's
// cfs_quota_us and cfs_period_us joined): ceil(QUOTA / PERIOD); 0 when unlimited ("max", -1) or
// unreadable. Example: "150000 100000" -> 2, "max 100000" -> 0.
int cpus_from_cgroup_quota(const std::string& quota_period);

// Threads to use when a caller asks for `requested` (0 = usable_cpus(), shared evenly among the
// LOCAL_WORLD_SIZE ranks that `unstuck launch` or torchrun start on this machine).
int resolve_threads(int requested);

// Calls fn(begin, end, chunk) for `chunks` contiguous, near-equal chunks of [0, n), each chunk on its
// own OpenMP thread. Chunk boundaries are multiples of `align` elements except the last. Runs inline
// when chunks <= 1. Exceptions from any chunk are rethrown.
void parallel_chunks(std::size_t n, int chunks, std::size_t align,
                     const std::function<void(std::size_t, std::size_t, int)>& fn);

}  // namespace unstuck
