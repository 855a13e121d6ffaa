// Private: `unstuck bench comm`, bytes moved and time spent in collectives per optimizer step of
// the sharded (ZeRO-1) update, world size 1 vs 2 (Gloo on loopback), and the ratio of the bytes to
// the ZeRO-1 minimum (reduce-scatter of the FP32 gradient + all-gather of the compute weights).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace unstuck::bench {

struct CommBenchOptions {
  bool json = false;                                   // one JSON object instead of the table
  std::string config = "configs/grpo/countdown.yaml";  // model shape (its base_model) and precision
  int64_t steps = 6;                                   // optimizer steps per world size (the first is a warm-up)
  std::string worker_out;  // internal: run as one rank of the world-size-2 measurement, rank 0 writes here
};

void run_comm_bench(const CommBenchOptions& options, std::ostream& out);

}  // namespace unstuck::bench
