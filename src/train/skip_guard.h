// Watches the optimizer steps skipped for non-finite gradients (FP16 overflow, or a diverged run in
// any mode): warns on each one, and stops the run with an error and a hint after
// precision.loss_scale.max_consecutive_skips in a row, instead of "training" on unchanged weights.
#pragma once

#include <cstdint>
#include <string>

#include "unstuck/config/run_config.h"

namespace unstuck::train {

class SkipGuard {
 public:
  // `who` prefixes the messages ("train", "sft").
  SkipGuard(const RunConfig& config, std::string who) : config_(config), who_(std::move(who)) {}
  // Records one optimizer step. Throws UserError after too many consecutive skips.
  void record(int64_t step, bool skipped, double loss_scale, double lr);
  int64_t in_a_row() const { return in_a_row_; }

 private:
  const RunConfig& config_;
  std::string who_;
  int64_t in_a_row_ = 0;
};

}  // namespace unstuck::train
