// Run-time detection of the CPU SIMD level our kernels can use (GCC's __builtin_cpu_supports), with
// the UNSTUCK_SIMD environment variable as a cap for experiments and for testing slower paths.
#include "unstuck/common/simd.h"

#include <cstdlib>
#include <cstring>
#include <fstream>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace unstuck {
namespace {

#if defined(__x86_64__) || defined(__i386__)
// F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports does not know "f16c".
bool has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
}
#endif

SimdLevel hardware_level() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq"))
    return SimdLevel::avx512;
  if (__builtin_cpu_supports("avx2") && has_f16c()) return SimdLevel::avx2;
#endif
  return SimdLevel::scalar;
}

}  // namespace

const char* simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::avx512:
      return "avx512";
    case SimdLevel::avx2:
      return "avx2";
    case SimdLevel::scalar:
      return "scalar";
  }
  return "?";
}

SimdLevel detect_simd_level() {
  SimdLevel level = hardware_level();
  if (const char* cap = std::getenv("UNSTUCK_SIMD")) {
    SimdLevel wanted = level;
    if (std::strcmp(cap, "scalar") == 0) wanted = SimdLevel::scalar;
    if (std::strcmp(cap, "avx2") == 0) wanted = SimdLevel::avx2;
    if (static_cast<int>(wanted) < static_cast<int>(level)) level = wanted;
  }
  return level;
}

std::vector<SimdLevel> available_simd_levels() {
  std::vector<SimdLevel> levels;
  const SimdLevel best = hardware_level();
  for (SimdLevel l : {SimdLevel::scalar, SimdLevel::avx2, SimdLevel::avx512})
    if (static_cast<int>(l) <= static_cast<int>(best)) levels.push_back(l);
  return levels;
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    const size_t begin = line.find_first_not_of(" \t", colon + 1);
    return begin == std::string::npos ? "unknown" : line.substr(begin);
  }
  return "unknown";
}

}  // namespace unstuck
