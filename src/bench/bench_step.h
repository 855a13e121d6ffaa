// Private: `unstuck bench step`, GRPO step time of the default config in every precision mode in
// one run, with the phase breakdown and the cost of stochastic rounding over round-to-nearest.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace unstuck::bench {

struct StepBenchOptions {
  bool json = false;          // one JSON object instead of the table
  std::string config = "configs/grpo/countdown.yaml";  // GRPO config to time (its base_model)
  std::string model;          // base policy directory; empty = the config's, or a random one
  int64_t steps = 4;          // rollout batches per measured run (the first is a warm-up)
  int repeats = 2;            // runs per mode, interleaved across modes; the best is kept
};

void run_step_bench(const StepBenchOptions& options, std::ostream& out);

}  // namespace unstuck::bench
