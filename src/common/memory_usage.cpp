// Resident-set figures from /proc/self/status; the high-water reset through /proc/self/clear_refs.
#include "unstuck/common/memory_usage.h"

#include <time.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

namespace unstuck {
namespace {

int64_t status_kib(const char* key) {
  std::ifstream in("/proc/self/status");
  const std::string prefix = std::string(key) + ":";
  for (std::string line; std::getline(in, line);)
    if (line.compare(0, prefix.size(), prefix) == 0) return std::stoll(line.substr(prefix.size()));
  return 0;
}

}  // namespace

int64_t current_rss_bytes() { return status_kib("VmRSS") * 1024; }

int64_t peak_rss_bytes() { return status_kib("VmHWM") * 1024; }

bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return bool(out);
}

double seconds_since_process_start() {
  std::ifstream in("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), {});
  const std::size_t close = stat.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos) return -1;
  std::istringstream fields(stat.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i)
    if (i == 22) {
      const long ticks = ::sysconf(_SC_CLK_TCK);
      timespec now{};
      if (ticks <= 0 || ::clock_gettime(CLOCK_BOOTTIME, &now) != 0) return -1;
      return double(now.tv_sec) + double(now.tv_nsec) * 1e-9 - std::stod(field) / double(ticks);
    }
  return -1;
}

}  // namespace unstuck
