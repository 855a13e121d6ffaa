// Fork-join chunked loop on OpenMP. libtorch's CPU ops run on OpenMP too (the same libgomp.so.1 is
// loaded once per process), so our kernels reuse its worker threads instead of competing with them:
// with separate std::threads, libtorch's spin-waiting workers starved our kernels between ops.
#include "unstuck/common/parallel.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

namespace unstuck {

namespace {

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  if (in) std::getline(in, line);
  return line;
}

// CPUs granted by the cgroup's CPU quota (v2 cpu.max, else v1 cfs_quota/period); 0 = no quota.
int cgroup_quota_cpus() {
  const int v2 = cpus_from_cgroup_quota(read_first_line("/sys/fs/cgroup/cpu.max"));
  if (v2 > 0) return v2;
  const std::string quota = read_first_line("/sys/fs/cgroup/cpu/cpu.cfs_quota_us");
  const std::string period = read_first_line("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
  if (quota.empty() || period.empty()) return 0;
  return cpus_from_cgroup_quota(quota + " " + period);
}

}  // namespace

int cpus_from_cgroup_quota(const std::string& quota_period) {
  std::istringstream in(quota_period);
  std::string quota;
  long long period = 0;
  if (!(in >> quota >> period) || period <= 0 || quota == "max") return 0;
  char* end = nullptr;
  const long long q = std::strtoll(quota.c_str(), &end, 10);
  if (end == quota.c_str() || *end != '\0' || q <= 0) return 0;  // v1 writes -1 for "no quota"
  // A quota of 1.5 periods lets 2 threads run most of the time; round up, as the JVM and Go do.
  return static_cast<int>(std::ceil(static_cast<double>(q) / static_cast<double>(period)));
}

int usable_cpus() {
  int cpus = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cpus = CPU_COUNT(&set);
  if (cpus <= 0) cpus = static_cast<int>(std::thread::hardware_concurrency());
  const int quota = cgroup_quota_cpus();
  if (quota > 0) cpus = std::min(cpus, quota);
  return std::max(1, cpus);
}

int resolve_threads(int requested) {
  if (requested > 0) return requested;
  // Ranks started on this machine by `unstuck launch` or torchrun share its cores evenly.
  const char* local_world = std::getenv("LOCAL_WORLD_SIZE");
  const int ranks = local_world ? std::max(1, std::atoi(local_world)) : 1;
  return std::max(1, usable_cpus() / ranks);
}

void parallel_chunks(std::size_t n, int chunks, std::size_t align,
                     const std::function<void(std::size_t, std::size_t, int)>& fn) {
  if (align == 0) align = 1;
  const std::size_t units = (n + align - 1) / align;
  chunks = static_cast<int>(std::min<std::size_t>(std::max(chunks, 1), std::max<std::size_t>(units, 1)));
  if (chunks <= 1) {
    fn(0, n, 0);
    return;
  }
  std::vector<std::exception_ptr> errors(chunks);
#pragma omp parallel for num_threads(chunks) schedule(static, 1)
  for (int c = 0; c < chunks; ++c) {
    const std::size_t begin = std::min(n, units * c / chunks * align);
    const std::size_t end = std::min(n, units * (c + 1) / chunks * align);
    try {  // exceptions must not leave an OpenMP region
      fn(begin, end, c);
    } catch (...) {
      errors[c] = std::current_exception();
    }
  }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace unstuck
