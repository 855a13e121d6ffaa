// Resident-set figures from /proc/self/status (and the descendants' /proc/<pid>/stat); memory
// ceilings from the cgroup files and /proc/meminfo.
#include "unstuck/common/memory_usage.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

namespace unstuck {
namespace {

int64_t status_kib(const char* key) {
  std::ifstream in("/proc/self/status");
  const std::string prefix = std::string(key) + ":";
  for (std::string line; std::getline(in, line);)
    if (line.compare(0, prefix.size(), prefix) == 0) return std::stoll(line.substr(prefix.size()));
  return 0;
}

// The first number of a file ("max" and a missing file give -1).
double file_number(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text)) return -1;
  char* end = nullptr;
  const double x = std::strtod(text.c_str(), &end);
  return end != text.c_str() && *end == '\0' ? x : -1;
}

// `key`'s value in a memory.stat file (0 when absent).
double stat_value(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string name;
  double value = 0;
  while (in >> name >> value)
    if (name == key) return value;
  return 0;
}

// v2 (memory.max) or v1 (memory.limit_in_bytes) files in `dir`; limit 0 when neither sets one. A
// v1 "unlimited" is the largest page-aligned int64 (about 2^63).
MemoryCeiling ceiling_in(const std::string& dir) {
  MemoryCeiling c;
  if (const double max = file_number(dir + "/memory.max"); max > 0) {
    c = {max, file_number(dir + "/memory.current") - stat_value(dir + "/memory.stat", "inactive_file"),
         dir + "/memory.max"};
  } else if (const double v1 = file_number(dir + "/memory.limit_in_bytes"); v1 > 0 && v1 < 0x1p60) {
    c = {v1, file_number(dir + "/memory.usage_in_bytes") - stat_value(dir + "/memory.stat", "total_inactive_file"),
         dir + "/memory.limit_in_bytes"};
  }
  c.used = std::max(c.used, 0.0);
  return c;
}

// Fields 3.. of a /proc/<pid>/stat file (field k at index k - 3), read after the command name in
// parentheses, which may hold spaces; empty when the file is gone or malformed.
std::vector<std::string> stat_fields(const std::filesystem::path& path) {
  std::ifstream in(path);
  const std::string stat((std::istreambuf_iterator<char>(in)), {});
  const std::size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 > stat.size()) return {};
  std::istringstream text(stat.substr(close + 2));
  return {std::istream_iterator<std::string>(text), std::istream_iterator<std::string>()};
}

// This process's v2 cgroup directory ("0::/path" in /proc/self/cgroup), "" when none.
std::string own_v2_cgroup() {
  std::ifstream in("/proc/self/cgroup");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("0::", 0) == 0) return "/sys/fs/cgroup" + (line.size() > 4 ? line.substr(3) : std::string());
  return "";
}

}  // namespace

MemoryCeiling cgroup_memory_ceiling() {
  if (const char* dir = std::getenv("UNSTUCK_CGROUP_MEMORY_DIR"); dir && *dir) return ceiling_in(dir);
  const std::string own = own_v2_cgroup();
  if (!own.empty())
    if (MemoryCeiling c = ceiling_in(own); c.limit > 0) return c;
  if (MemoryCeiling c = ceiling_in("/sys/fs/cgroup"); c.limit > 0) return c;
  return ceiling_in("/sys/fs/cgroup/memory");
}

MemoryCeiling host_memory_ceiling() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kib = 0, total = 0, available = -1, swap_total = 0, swap_free = 0;
  while (in >> key >> kib) {
    if (key == "MemTotal:") total = kib * 1024;
    if (key == "MemAvailable:") available = kib * 1024;
    if (key == "SwapTotal:") swap_total = kib * 1024;
    if (key == "SwapFree:") swap_free = kib * 1024;
    in.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  if (total <= 0 || available < 0) return {};
  // The kernel kills when memory and swap are both exhausted.
  return {total + swap_total, total + swap_total - available - swap_free, "/proc/meminfo"};
}

int64_t current_rss_bytes() { return status_kib("VmRSS") * 1024; }

int64_t peak_rss_bytes() { return status_kib("VmHWM") * 1024; }

int64_t descendants_rss_bytes() {
  // Every process's parent and resident pages from /proc/<pid>/stat (fields 4 and 24), then the
  // tree under this process.
  std::map<long, std::vector<long>> children;
  std::map<long, int64_t> rss_pages;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::vector<std::string> fields = stat_fields(entry.path() / "stat");
    if (fields.size() < 24 - 3 + 1) continue;  // gone meanwhile
    const long ppid = std::stol(fields[4 - 3]);
    const int64_t rss = std::stoll(fields[24 - 3]);
    const long pid = std::stol(name);
    children[ppid].push_back(pid);
    rss_pages[pid] = rss;
  }
  const long page = ::sysconf(_SC_PAGESIZE);
  int64_t total = 0;
  std::vector<long> todo{long(::getpid())};
  while (!todo.empty()) {
    const long pid = todo.back();
    todo.pop_back();
    for (long child : children[pid]) {
      total += rss_pages[child] * (page > 0 ? page : 4096);
      todo.push_back(child);
    }
  }
  return total;
}

double seconds_since_process_start() {
  const std::vector<std::string> fields = stat_fields("/proc/self/stat");
  const long ticks = ::sysconf(_SC_CLK_TCK);
  timespec now{};
  if (fields.size() < 22 - 3 + 1 || ticks <= 0 || ::clock_gettime(CLOCK_BOOTTIME, &now) != 0) return -1;
  return double(now.tv_sec) + double(now.tv_nsec) * 1e-9 - std::stod(fields[22 - 3]) / double(ticks);  // starttime
}

}  // namespace unstuck
