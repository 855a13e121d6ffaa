// Private: where a GRPO run's metrics go. One writer per run: a line per rollout batch in
// <run dir>/metrics.jsonl, the same scalars as TensorBoard events, and the console progress line.
// On resume, metrics.jsonl keeps the lines of the steps up to the checkpoint (a torn last line of a
// killed run is dropped) and the new steps are appended.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "unstuck/log/tensorboard.h"

namespace unstuck::train {

using MetricsLine = nlohmann::ordered_json;

// Keeps the metrics lines of steps <= `last_step` (a resumed run rewrites what came after). A torn
// last line (the run was killed while writing it) is dropped with a warning; a bad line elsewhere is
// an error naming file and line. Returns the first kept line's reward_mean (0 when none).
double truncate_metrics(const std::filesystem::path& path, int64_t last_step);

class MetricsWriter {
 public:
  // `lead`: this rank writes the files (other ranks only print the console line). `resumed_step`:
  // the checkpoint's step when the run continues one. `first_step` .. `last_step`: this run's steps.
  MetricsWriter(const std::filesystem::path& run_dir, bool lead, std::optional<int64_t> resumed_step,
                int64_t first_step, int64_t last_step);

  // reward_mean of the run's first step (from the kept lines on resume; else set by write()).
  double first_reward_mean() const { return first_reward_; }
  // Writes one step's line (its "step" key first) to every sink.
  void write(const MetricsLine& m);

 private:
  void print_console_line(const MetricsLine& m) const;

  bool lead_;
  int64_t first_step_, last_step_;
  double first_reward_ = 0;
  std::ofstream jsonl_;
  std::optional<TensorBoardWriter> tensorboard_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace unstuck::train
