// Private: `unstuck bench step`, GRPO step time of the default config in every precision mode in
// one run, with the phase breakdown, rollout and training tokens/s, model FLOP utilization against
// the device's peak, and the cost of stochastic rounding over round-to-nearest.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace unstuck::bench {

struct StepBenchOptions {
  bool json = false;                                   // one JSON object instead of the table
  std::string config = "configs/grpo/countdown.yaml";  // GRPO config to time (its base_model)
  std::string model;                                   // base policy directory; empty = the config's, or a random one
  int64_t steps = 4;                                   // rollout batches per measured run (the first is a warm-up)
  int repeats = 2;                                     // runs per mode, interleaved across modes; the best is kept
  std::string device = "auto";                         // run.device of the timed runs: auto | cpu | cuda
  double peak_tflops = 0;  // peak of the device for the model FLOP utilization; 0 = estimated (CPU)
  std::string modes;       // comma-separated precision modes to time; empty = all five
};

void run_step_bench(const StepBenchOptions& options, std::ostream& out);

}  // namespace unstuck::bench
