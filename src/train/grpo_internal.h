// Private: helpers shared by the files of GrpoTrainer (grpo_trainer.cpp, grpo_rollout.cpp,
// grpo_update.cpp, grpo_step_metrics.cpp).
#pragma once

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

#include "unstuck/common/memory_usage.h"

namespace unstuck::train {

// run.log_level: debug: the resident memory and its high-water mark at a point of the step.
inline void trace_memory(const char* where) {
  if (!spdlog::should_log(spdlog::level::debug)) return;
  spdlog::debug("memory at {}: resident {:.3f} GiB, peak {:.3f} GiB", where, double(current_rss_bytes()) / (1 << 30),
                double(peak_rss_bytes()) / (1 << 30));
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Row ranges [begin, end) of at most `chunk` rows (0: one range).
inline std::vector<std::pair<int64_t, int64_t>> row_chunks(int64_t begin, int64_t end, int64_t chunk) {
  std::vector<std::pair<int64_t, int64_t>> out;
  const int64_t step = chunk > 0 ? chunk : std::max<int64_t>(end - begin, 1);
  for (int64_t b = begin; b < end; b += step) out.emplace_back(b, std::min(end, b + step));
  return out;
}

}  // namespace unstuck::train
