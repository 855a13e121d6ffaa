// Private: `unstuck bench generate`, batched sampling throughput with the KV cache against full
// recompute (the baseline), in FP32 and BF16 compute, measured in the same run: steady state after a
// warm-up, median and range over repeats.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace unstuck::bench {

struct GenerateBenchOptions {
  bool json = false;            // one JSON object instead of the table
  int64_t sequences = 256;      // batch of prompts sampled together
  int64_t prompt_tokens = 16;   // tokens per prompt
  int64_t new_tokens = 64;      // tokens generated per sequence
  int threads = 0;              // libtorch threads (0 = all cores)
  int repeats = 5;              // timed runs per measurement after a warm-up (median and range)
  std::string dtype = "both";   // fp32, bf16 or both
  bool recompute = true;        // also time the full-recompute baseline (kv_speedup)
  std::string model;            // a model directory (Hugging Face layout); empty: the default shape, random
  std::string device = "cpu";   // cpu, cuda or cuda:N
  std::string decode = "auto";  // rollout.decode modes to time, comma-separated (the first is kv_*)
  // A run config: its work is timed (the policy grpo.base_model, the first grpo.prompts_per_step
  // training prompts formatted as training formats them, each grpo.group_size times, sampled as its
  // rollout section says, stopping at the model's stop tokens; precision.mode's compute dtype,
  // precision.threads, run.device). Options named in `given` override it. KV path only.
  std::string config;
  std::vector<std::string> given;  // the options given on the command line ("--sequences", ...)
};

void run_generate_bench(const GenerateBenchOptions& options, std::ostream& out);

}  // namespace unstuck::bench
