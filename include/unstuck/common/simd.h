// CPU SIMD levels that our kernels are compiled for, and run-time detection of the best one this CPU
// supports. Kernels take the level explicitly so tests can run every path on the same inputs.
#pragma once

#include <string>
#include <vector>

namespace unstuck {

enum class SimdLevel { scalar = 0, avx2 = 1, avx512 = 2 };

// Best level this CPU and build support; UNSTUCK_SIMD=scalar|avx2|avx512 in the environment caps it.
SimdLevel detect_simd_level();
// Every level usable here, lowest first (scalar is always present).
std::vector<SimdLevel> available_simd_levels();
const char* simd_level_name(SimdLevel level);
// The CPU's name as /proc/cpuinfo's first "model name" gives it ("AMD EPYC 7B13"), or "unknown".
std::string cpu_model_name();

}  // namespace unstuck
